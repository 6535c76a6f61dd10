// The other client, for bench/nip46_bench.py: nostr-tools' BunkerSigner timing the same work as our RemoteSigner
// against the same kind of bunker, so the two clients are compared in one run on one machine.
//
//   node client_bench.mjs <job.json>
//
// The job: {"bunker": "<bunker:// URI>", "rounds": N, "doc": "...", "rumor": "...", "peer": "<hex>",
//           "batches": [[payload, ...], ...]}  (each batch: payloads from the peer, decrypted at once, then one
// at a time). Prints one JSON line of medians in milliseconds.
import { readFileSync } from 'node:fs'
import WebSocket from 'ws'
import { SimplePool, useWebSocketImplementation } from 'nostr-tools/pool'
import { generateSecretKey } from 'nostr-tools/pure'
import { BunkerSigner, parseBunkerInput } from 'nostr-tools/nip46'

useWebSocketImplementation(WebSocket)

const job = JSON.parse(readFileSync(process.argv[2], 'utf8'))
const pool = new SimplePool()
const signer = BunkerSigner.fromBunker(generateSecretKey(), await parseBunkerInput(job.bunker), { pool })
await signer.connect()
const user = await signer.getPublicKey()
const now = () => Math.floor(Date.now() / 1000)

const median = values => {
  const s = [...values].sort((a, b) => a - b)
  const m = s.length >> 1
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2
}
const timed = async (fn, rounds, warmup = 2) => {
  for (let i = 0; i < warmup; i++) await fn(i)
  const times = []
  for (let i = 0; i < rounds; i++) {
    const t0 = performance.now()
    await fn(i)
    times.push(performance.now() - t0)
  }
  return median(times)
}

const sign = content => signer.signEvent({ kind: 30078, content, created_at: now(), tags: [['d', 'memory']] })
const seal = async (to, rumor) =>
  signer.signEvent({ kind: 13, content: await signer.nip44Encrypt(to, rumor), created_at: now(), tags: [] })
const payload = await signer.nip44Encrypt(user, job.doc)

const out = {
  sign: await timed(() => sign(payload), job.rounds),
  save: await timed(async i => sign(await signer.nip44Encrypt(user, job.doc + i)), job.rounds),
  'DM reply': await timed(async () => {
    await seal(job.peer, job.rumor)
    await seal(user, job.rumor)
  }, job.rounds),
}
let batch = 0
const together = () => Promise.all(job.batches[batch++].map(p => signer.nip44Decrypt(job.peer, p)))
const oneByOne = async () => {
  for (const p of job.batches[batch++]) await signer.nip44Decrypt(job.peer, p)
}
const few = Math.max(3, job.rounds >> 2)
out['startup 20 decrypts'] = await timed(together, few, 1)
out['... one at a time'] = await timed(oneByOne, few, 1)
console.log(JSON.stringify(out))
await signer.close()
pool.close(pool.listConnectionStatus ? [...pool.listConnectionStatus().keys()] : [])
process.exit(0)
