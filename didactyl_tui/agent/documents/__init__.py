"""The agent's documents on Nostr: short- and long-term memory, the soul, the task list and the self-context it
publishes (profile, contacts, relay list). One model for all of them: a :mod:`codec <.codec>` per document says how
its text becomes an event and back; reading, saving, versions, history, conflicts and relay consensus are written
once (:mod:`.store`, :mod:`.sync`) and shared. See docs/sync.md."""
