"""The agent's documents on Nostr: short- and long-term memory, the soul, the task list and the self-context it
publishes (profile, contacts, relay list). One model for all of them:

- :mod:`.keys` names each document (kind, ``d`` tag, title, encryption); :mod:`.codec` is what a codec is (how a
  document's text becomes an event and back); each document's codec lives with its concept (soul/, tasks/,
  memory/, identity/) and the service assembles them, so this package imports nothing of agent/ above it;
- :mod:`.store` holds the newest version of each, :mod:`.sync` saves, versions and repairs them;
- :mod:`.outbox` and :mod:`.publisher` deliver every version (written before it is sent, retried until a relay
  takes it); :mod:`.history` keeps every version seen; :mod:`.lineage` and :mod:`.merge` tell a later edit from
  a concurrent one and merge two from their common base.

See docs/sync.md."""
