"""One agent turn: :func:`.loop.run_turn` streams the model's reply, runs its tool calls and feeds the results
back, as an async stream of the past-tense events in :mod:`.events` (what the TUI and the CLI render). It saves
nothing: the service keeps the conversation."""
