"""A relay pushing souls on the running service's live subscription changes nothing it should not.

Pushed by a scripted relay on the soul subscription (it acknowledges every publish, stores nothing), each
dated after the soul in use so it would win if trusted:
a bad signature and a changed content under our key, a stranger's soul, our key with another ``d`` tag, and
300 distinct genuine versions older than the soul in use (replays of old versions: never even read).
None is used and none is warned about; a genuine newer soul that fails the linter,
delivered again and again, is warned about once; a genuine good one after all that is used.
"""

from __future__ import annotations

import time
from pathlib import Path

from agent_support import AGENT_KEY, OTHER_KEY, soul_event, wait_for
from fault_relay import forged, with_bad_signature
from relay_servers import ScriptedConnection, ScriptedRelay, fast_client_kwargs

from didactyl_tui.agent.soul.template import SoulTemplate, TemplateSection
from didactyl_tui.config import Config
from didactyl_tui.nostr.event import sign_event
from didactyl_tui.nostr.kinds import SOUL
from didactyl_tui.service.app import AppService
from didactyl_tui.service.events import ServiceEvent, ServiceWarning, SoulChanged

OLD_VERSIONS = 300


def _soul(text: str, *, tool: str | None = None) -> SoulTemplate:
    sections = [TemplateSection("persona", "system", None, text, True)]
    if tool:
        sections.append(TemplateSection("weather", "system", tool, None, True))
    return SoulTemplate(tuple(sections), "test")


async def _persona(svc: AppService) -> str:
    return (await svc.prompt.dry_run("attack-check")).layers[0].content


class SoulPusher:
    """Acknowledges every EVENT, answers every REQ with EOSE at once, and keeps the soul subscriptions so the
    test can push events on them."""

    def __init__(self) -> None:
        self.soul_subs: list[tuple[ScriptedConnection, str]] = []

    async def script(self, conn: ScriptedConnection) -> None:
        while True:
            msg = await conn.recv()
            if msg and msg[0] == "REQ":
                if any(SOUL in f.get("kinds", []) for f in msg[2:] if isinstance(f, dict)):
                    self.soul_subs.append((conn, str(msg[1])))
                await conn.send(["EOSE", msg[1]])
            elif msg and msg[0] == "EVENT":
                await conn.send(["OK", msg[1]["id"], True, ""])
            elif msg and msg[0] == "CLOSE":  # a one-shot query (a check of which version a relay holds) is over
                self.soul_subs = [(c, s) for c, s in self.soul_subs if not (c is conn and s == str(msg[1]))]

    async def push(self, events: list[dict]) -> None:
        # The oldest subscription still open: the live one (the start's loads are closed before it opens; a later
        # check's query, closed once answered, would drop what is pushed on it: the newest was taken before, and a
        # check asked between two pushes lost the last one under load).
        conn, sub = self.soul_subs[0]
        for ev in events:
            await conn.send(["EVENT", sub, ev])


async def test_forged_stray_and_replayed_souls_change_nothing_and_a_bad_one_is_told_once(tmp_path: Path) -> None:
    heard: list[ServiceEvent] = []
    pusher = SoulPusher()
    async with ScriptedRelay(pusher.script) as relay:
        cfg = Config()
        cfg.relays.embedded.enabled, cfg.relays.urls, cfg.relays.timeout_s = False, [relay.url], 3.0
        cfg.memory.backend = "none"
        svc = AppService(cfg, data_dir=tmp_path / "data", env={"DIDACTYL_NSEC": AGENT_KEY.nsec()},
                         relay_client_options=fast_client_kwargs())
        svc.add_listener(heard.append)
        async with svc:
            assert (await svc.soul.publish(_soul("You are the real soul."))).any_accepted
            in_use = svc.soul.view()
            assert in_use.created_at is not None
            later = max(int(time.time()), in_use.created_at) + 60
            real = soul_event(AGENT_KEY, _soul("a forged soul"), later)
            attacks = [
                with_bad_signature(real),
                forged(real, content=soul_event(AGENT_KEY, _soul("changed"), later).content),
                soul_event(OTHER_KEY, _soul("a stranger's soul"), later).to_dict(),
                sign_event(AGENT_KEY, kind=SOUL, content=real.content, created_at=later,
                           tags=[("d", "not-the-soul"), ("encrypted", "nip44")]).to_dict(),
                *(soul_event(AGENT_KEY, _soul(f"old {n}"), in_use.created_at - 1 - n).to_dict()
                  for n in range(OLD_VERSIONS)),
            ]
            await pusher.push(attacks)
            bad = soul_event(AGENT_KEY, _soul("lint me", tool="get_weather"), later + 1)
            for _ in range(3):  # the same bad soul, delivered again and again
                await pusher.push([bad.to_dict()])
            good = soul_event(AGENT_KEY, _soul("You are the newer real soul."), later + 2)
            await pusher.push([good.to_dict()])

            async def uses_the_good_one() -> bool:
                return await _persona(svc) == "You are the newer real soul."

            await wait_for(uses_the_good_one, timeout=20)
            # A last real soul behind everything else: once it is news, all that came before it was judged.
            last = soul_event(AGENT_KEY, _soul("You are the last real soul."), later + 3)
            await pusher.push([last.to_dict()])
            await wait_for(lambda: any(isinstance(e, SoulChanged) and e.event_id == last.id for e in heard), timeout=20)
            soul_news = [e for e in heard if isinstance(e, SoulChanged)]
            assert [e.event_id for e in soul_news] == [good.id, last.id]
            warnings = [e.message for e in heard if isinstance(e, ServiceWarning) and "soul" in e.message]
            assert len(warnings) == 1 and bad.id[:12] in warnings[0] and "get_weather" in warnings[0], warnings
