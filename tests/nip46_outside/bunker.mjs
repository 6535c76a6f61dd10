// A NIP-46 bunker from a public implementation, headless, for tests: applesauce-signers' NostrConnectProvider
// holding the user's key, over nostr-tools' relay pool.
//
//   BUNKER_USER_KEY=<hex> [BUNKER_SIGNER_KEY=<hex>] [BUNKER_SECRET=<text>] [BUNKER_NAMES_KEY=<hex pubkey>] \
//     node bunker.mjs <relay-url>...
//
// BUNKER_NAMES_KEY: a broken or hostile signer, whose get_public_key names that key while it signs with the user's.
//
// Prints one JSON line {"bunker": "<bunker:// URI>"} once a relay has taken its subscription, then serves
// until its standard input closes (the test ends it that way, or by signal).
import WebSocket from 'ws'
import { SimplePool, useWebSocketImplementation } from 'nostr-tools/pool'
import { Observable } from 'rxjs'
import { NostrConnectProvider, PrivateKeySigner } from 'applesauce-signers'

useWebSocketImplementation(WebSocket)

const relays = process.argv.slice(2)
const env = process.env
if (!relays.length || !/^[0-9a-f]{64}$/.test(env.BUNKER_USER_KEY ?? '')) {
  console.error('usage: BUNKER_USER_KEY=<hex> node bunker.mjs <relay-url>...')
  process.exit(2)
}
const hex = text => Uint8Array.from(Buffer.from(text, 'hex'))

const pool = new SimplePool()
let listening
const ready = new Promise(resolve => (listening = resolve))

const user = new PrivateKeySigner(hex(env.BUNKER_USER_KEY))
const upstream = env.BUNKER_NAMES_KEY
  ? { getPublicKey: async () => env.BUNKER_NAMES_KEY, signEvent: t => user.signEvent(t), nip44: user.nip44 }
  : user

const provider = new NostrConnectProvider({
  relays,
  upstream,
  signer: env.BUNKER_SIGNER_KEY ? new PrivateKeySigner(hex(env.BUNKER_SIGNER_KEY)) : undefined,
  bunkerSecret: env.BUNKER_SECRET || undefined,
  subscriptionMethod: (urls, filters) =>
    new Observable(subscriber => {
      const sub = pool.subscribeMany(urls, filters[0], {
        onevent: event => subscriber.next(event),
        oneose: () => listening(),
      })
      return () => sub.close()
    }),
  publishMethod: (urls, event) => Promise.any(pool.publish(urls, event)),
})

await provider.start()
await ready
console.log(JSON.stringify({ bunker: await provider.getBunkerURI() }))

const stop = async () => {
  await provider.stop()
  pool.close(relays)
  process.exit(0)
}
process.stdin.on('end', stop)
process.stdin.resume()
process.on('SIGTERM', stop)
