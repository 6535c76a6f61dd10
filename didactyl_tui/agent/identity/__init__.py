"""Who the agent is on Nostr.

- :mod:`.keystore`: the agent's secret key (``$DIDACTYL_NSEC`` or ``<data dir>/agent.key``, 0600);
- :mod:`.signer_session`: the NIP-46 connection when the key is in a remote signer (``signer.json``, 0600);
- :mod:`.signer_cache`: what that signer decrypted for the agent itself, kept so the app opens while it is away;
- :mod:`.cache`: the agent's and the admin's profile, contacts, relay list and notes as the relays hold them,
  kept current by a live subscription (the context tools and the soul read it, never the network);
- :mod:`.startup_events`: the events the config declares the agent should have, published once."""
