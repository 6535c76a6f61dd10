"""The agent's documents on Nostr: short- and long-term memory, the soul, the task list and the self-context it
publishes (profile, contacts, relay list). One model for all of them:

- :mod:`.keys` names each document (kind, ``d`` tag, title, encryption); :mod:`.codec` and :mod:`.codecs` say how
  each one's text becomes an event and back (a new document type is a key and a codec);
- :mod:`.store` holds the newest version of each, :mod:`.sync` saves, versions and repairs them;
- :mod:`.outbox` and :mod:`.publisher` deliver every version (written before it is sent, retried until a relay
  takes it); :mod:`.history` keeps every version seen; :mod:`.lineage` and :mod:`.merge` tell a later edit from
  a concurrent one and merge two from their common base.

See docs/sync.md."""
