"""Direct messages (NIP-17): the agent answers what reaches its inbox, each message once.

- :mod:`.inbox`: which gift wraps reach the model, in which conversation (the policy: who may write);
- :mod:`.ledger`: what became of each message, and the outbox of signed reply wraps (SQLite, 0600);
- :mod:`.delivery`: each reply wrap to the relays its recipient reads, retried until one takes it;
- :mod:`.signer`: the one place the DM code uses the agent's key (seal, wrap, unwrap, NIP-42 sign-in);
- :mod:`.invitation`: one-use invitations that pair an admin with the agent, and the pairing's fingerprint;
- :mod:`.undelivered`: the admin's side (``attach``): messages no relay of the agent's took yet, kept signed.

The service side (sessions, turns, the relays it listens on) is ``service/dm.py``. See docs/direct-messages.md."""
