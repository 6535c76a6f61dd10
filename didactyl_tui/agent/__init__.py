"""The agent: what it is made of, knowing nothing of the UI (the service drives it; nostr/ is its protocol).

Rooms, each a package that says what it owns:

- ``documents/``: the agent's documents on Nostr (memories, soul, task list, profile, contacts, relay list) as one
  model: a key and a codec per document; the store, the sync, the outbox and publisher, history, lineage, merge;
- ``memory/``: what is memory's own beyond being documents: the memory backends (recall, Honcho);
- ``soul/``: the prompt as data: the template, its assembly into the prompt, its event form, its lint;
- ``tasks/``: the task list and the book the task tools change it through;
- ``identity/``: the agent's key, the agent's and admin's identity as the relays hold it, the startup events;
- ``conversations/``: chats kept on this device (SQLite): sessions, messages, turns, prompt assemblies;
- ``dm/``: NIP-17 direct messages: inbox, ledger, reply delivery, the DM signer;
- ``llm/``: the language model: the client (the only door to litellm), its helper process, tokens, limits;
- ``turn/``: one turn (the loop) and the events it emits;
- ``tools/``: the tools the model may call, each declared once (``registry.py``), one module per family.

Beside them: ``bundle.py`` (the backup bundle's format), ``background.py`` (background tasks kept and cancelled
together) and ``private_files.py`` (every file the app keeps is 0600). See docs/architecture.md."""
