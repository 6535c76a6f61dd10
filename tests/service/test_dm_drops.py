"""What is dropped is counted and logged: a hostile relay serves gift wraps with bad signatures, bad ids, future
dates, a forged sender and strangers' messages. Each cause is counted, logged once with its count when first
seen (a flood is not a line per wrap), and its running count is logged again at stop; the app's status shows
the counts. None reaches the model."""

from __future__ import annotations

import logging
import random
import time
from pathlib import Path
from typing import Any

import pytest
from agent_support import ADMIN_KEY, AGENT_KEY, OTHER_KEY
from dm_support import AGENT_ENV, dm_config, until
from relay_servers import ScriptedConnection, ScriptedRelay, fast_client_kwargs

from didactyl_tui.nostr import nip44
from didactyl_tui.nostr.event import Event, sign_event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.kinds import GIFT_WRAP
from didactyl_tui.nostr.nip17 import make_message, wrap_message
from didactyl_tui.nostr.nip59 import Rumor, gift_wrap, seal
from didactyl_tui.service.app import AppService

ME, ADMIN = AGENT_KEY.public_key_hex, ADMIN_KEY.public_key_hex
FRIEND = SecretKey.from_hex("6b" * 32)


def _wrap(sender: SecretKey, seed: int, *, created_at: int | None = None) -> Event:
    now = int(time.time())
    rumor = make_message(sender.public_key_hex, [ME], f"message {seed}", created_at=created_at or now)
    return wrap_message(rumor, sender, now=now, rng=random.Random(seed))[ME]


def _bad_wraps() -> list[dict[str, Any]]:
    now = int(time.time())
    bad_sig = [{**_wrap(ADMIN_KEY, n).to_dict(), "sig": "11" * 64} for n in range(3)]
    bad_id = [{**_wrap(ADMIN_KEY, 10 + n).to_dict(), "content": "altered"} for n in range(2)]
    sealed = seal(Rumor.build(ADMIN, kind=14, content="x", created_at=now, tags=[("p", ME)]), ADMIN_KEY, ME,
                  created_at=now)
    wrapped_ahead = gift_wrap(sealed, ME, wrapper_key=OTHER_KEY, created_at=now + 3600).to_dict()
    dated_ahead = _wrap(ADMIN_KEY, 20, created_at=now + 3600).to_dict()  # the message, not the wrap
    impostor = Rumor.build(FRIEND.public_key_hex, kind=14, content="x", created_at=now, tags=[("p", ME)])
    key = nip44.get_conversation_key(ADMIN_KEY.secret_hex(), ME)
    forged_seal = sign_event(ADMIN_KEY, kind=13, content=nip44.encrypt(impostor.to_json(), key), created_at=now)
    forged = gift_wrap(forged_seal, ME, wrapper_key=OTHER_KEY, created_at=now - 60).to_dict()
    strangers = [_wrap(OTHER_KEY, 30 + n).to_dict() for n in range(2)]
    return [*bad_sig, *bad_id, wrapped_ahead, dated_ahead, forged, *strangers]


async def test_dropped_wraps_are_counted_by_cause_and_logged_once_each_with_a_running_count(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bad = _bad_wraps()

    async def hostile(conn: ScriptedConnection) -> None:
        while True:
            msg = await conn.recv()
            if msg[0] == "REQ":
                if any(GIFT_WRAP in f.get("kinds", []) for f in msg[2:]):
                    for event in bad:
                        await conn.send(["EVENT", msg[1], event])
                await conn.send(["EOSE", msg[1]])
            elif msg[0] == "EVENT":
                await conn.send(["OK", msg[1]["id"], True, ""])

    caplog.set_level(logging.INFO, logger="didactyl.dm")
    async with ScriptedRelay(hostile) as relay:
        cfg = dm_config("http://127.0.0.1:9/v1", urls=[relay.url], admin=ADMIN, allow=[FRIEND.npub])
        svc = AppService(cfg, data_dir=tmp_path, answer_dms=True, env=AGENT_ENV,
                         relay_client_options=fast_client_kwargs())
        async with svc:
            expected = {"bad signature": 3, "bad id": 2, "future timestamp": 2, "forged sender": 1, "stranger": 2}
            status = await until(lambda: _when_counted(svc, sum(expected.values())), 30, "every wrap judged")
            during = [r.getMessage() for r in caplog.records if r.name == "didactyl.dm"]
            counts = svc.dm.counts
    after = [r.getMessage() for r in caplog.records if r.name == "didactyl.dm"][len(during):]
    assert status.not_answered == expected
    assert status.summary().endswith("not answered: bad id 2, bad signature 3, forged sender 1, "
                                     "future timestamp 2, stranger 2")
    assert counts == {"unreadable": 8, "stranger": 2}
    # While running: one line per cause, its first; no line per wrap.
    firsts = sorted(line.split(":")[0] for line in during if "1 so far" in line)
    assert firsts == ["dm stranger", "dm unreadable (bad id)", "dm unreadable (bad signature)",
                      "dm unreadable (forged sender)", "dm unreadable (future timestamp)"]
    assert not any(" 2 so far" in line or " 3 so far" in line for line in during)
    # At stop, the running counts of what grew since.
    assert sorted(line for line in after if "so far" in line) == [
        "dm not answered (bad id): 2 so far", "dm not answered (bad signature): 3 so far",
        "dm not answered (future timestamp): 2 so far", "dm not answered (stranger): 2 so far"]


async def _when_counted(svc: AppService, total: int):
    status = await svc.dm.status()
    return status if status is not None and sum(status.not_answered.values()) >= total else None
