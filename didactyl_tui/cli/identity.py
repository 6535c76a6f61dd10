"""``didactyl identity show|publish|adopt``: the agent's public identity (kinds 0, 3, 10002) from the command line.

The relays are the reality; ``config.toml`` is the intent. ``show`` publishes nothing: it prints what the relays
hold and any *identity drift* (a version published elsewhere that the config would change), field by field.
``publish`` sends the config's fields merged into the relays' versions (fields the config does not set are kept);
``adopt`` takes the relays' versions as this device's own, so they are no longer reported as drift.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config import Config
from .command import EXIT_OK, Output, open_service
from .parser import CommandFailed


def _drift_json(drifts: list[Any]) -> list[dict[str, Any]]:
    return [{"kind": d.kind, "event_id": d.event.id, "created_at": d.event.created_at,
             "changes": [{"field": c.field, "relays": c.relays, "config": c.config} for c in d.changes]}
            for d in drifts]


def _view_json(view: Any) -> dict[str, Any]:
    return {"npub": view.npub, "pubkey": view.pubkey, "profile": view.profile, "contacts": view.contacts,
            "relays": [url for url, _ in view.relays],
            "event_ids": {str(kind): ev.id for kind, ev in ((0, view.profile_event), (3, view.contacts_event),
                                                             (10002, view.relays_event)) if ev is not None}}


async def run(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str], out: Output) -> int:
    from ..service.labels import drift_lines, one_line

    async with open_service(config, data, env, out, read_only=True) as service:
        view = service.identity.snapshot().agent
        if not view.loaded:
            raise CommandFailed("no relay answered: the agent's identity could not be read")
        if args.identity_command == "show":
            drifts = service.identity.drift()
            if args.json:
                out.json({**_view_json(view), "drift": _drift_json(drifts),
                          "would_publish": [d.kind for d in service.identity.drafts()]})
                return EXIT_OK
            out.print(view.npub)
            for key, value in sorted(view.profile.items()):
                out.print(f"{one_line(str(key), 40)}: {one_line(value if isinstance(value, str) else str(value))}")
            out.print(f"contacts: {len(view.contacts)} · relays: {len(view.relays)}")
            for line in drift_lines(drifts):
                out.print(f"drift: {line}")
            if drifts:
                out.print("(`didactyl identity adopt` keeps the relays' versions; "
                          "`didactyl identity publish` merges config.toml into them)")
            return EXIT_OK
        if args.identity_command == "adopt":
            kinds = await service.identity.adopt()
            if args.json:
                out.json({"adopted": kinds})
            else:
                out.print(f"adopted the relays' {', '.join(map(str, kinds))}" if kinds else "no drift to adopt")
            return EXIT_OK
        outcomes = await service.identity.republish_merged(only_drifted=False)
        if args.json:
            out.json({str(kind): {"event_id": o.event_id, "accepted_by": o.accepted_by, "summary": o.summary()}
                      for kind, o in outcomes.items()})
        elif not outcomes:
            out.print("nothing to publish: the relays already hold config.toml's fields")
        for kind, outcome in outcomes.items():
            if not args.json:
                out.print(f"kind {kind}: event {outcome.event_id}: {outcome.summary()}")
        if any(not o.any_accepted for o in outcomes.values()):
            raise CommandFailed("no relay accepted some of the identity events")
    return EXIT_OK
