"""The service: the API the views (TUI, CLI) use. Nothing is imported here: a view imports the module it needs, so
the TUI's first frame loads only the light ones (``events``, ``state``, ``labels``).

- ``app``: :class:`~.app.AppService`, which starts and stops the parts; the views reach each part through it
- ``parts``: the one function that builds the parts from the config, in dependency order, and what it built
- ``runtime``: the started objects (key, relays, stores, caches, conversations, backend); never None once built
- ``documents``: the agent's documents (memories, soul, tasks, profile, contacts, relays): snapshots, the one save
  path, rollback, history, relay status, the outbox; ``merge``: a concurrent edit's draft; ``soul``: the soul in
  use and publishing one; ``bundle``: backup export/import
- ``conversation``: what every chat part does (a Protocol); ``chat``: the chat when the agent runs here (turns, tool
  dispatch); ``prompt``: its prompt, assembled here (dry runs too); ``sessions``: the saved chats, without the
  service (light: the CLI's ``sessions`` commands, and a chat read tail first for ``--continue``); ``model``: the
  model in use (before start too), its check, tokens, the merge view's model draft
- ``identity``: the agent's and admin's public identity, fetched, followed and published (``startup``: the
  config's startup events); ``relays``: the relays in use as the views show them; ``relay_keeper``: the embedded
  relay kept reachable; ``relay_status``: what the shared embedded relay enforces (``didactyl relay status``)
- ``dm``: NIP-17 direct messages answered in DM sessions (``dm_answerer``: which process answers; ``dm_status``;
  ``dm_pairing``: invitations and refusals, answered without the model; ``invitations``: serve's attach line and
  ``didactyl invite``)
- ``attach``: this app as a window onto an agent elsewhere (``agent_address``: where it reads, found first;
  ``attached_chat``, ``attach_send``, ``attach_link``, ``attach_inbox``, ``attached_pairing``)
- ``notes``: who may confirm a ``post_note``; ``key_file``: the agent's key for the commands that start nothing
- ``agent_signer``: the agent's key as the service holds it (in hand, or a NIP-46 remote signer); ``signer_setup``:
  the TUI's first-run choice of where it lives (a pasted ``bunker://`` URI, a phone signer's ``nostrconnect://``)
- ``events``: the typed events views receive (light); ``state``: <data dir>/state.toml (light); ``labels``: how
  times, ids and drift read (light); ``views``: how the views see outbox entries, versions and relay consensus
- ``types``: the agent's and the protocol's types the views show or match on, named here because the views import
  only the service (the layer contract in pyproject.toml)
"""
