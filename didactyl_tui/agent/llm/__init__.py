"""The language model: the only door to it, and what a reply may cost.

- :mod:`.client`: ``stream_chat`` and the settings; the only module that imports litellm (lazily);
- :mod:`.worker` and :mod:`.worker_client`: the helper process that streams replies off the app's loop (the rows
  on its pipe: :mod:`.worker_wire`);
- :mod:`.errors`: a failed call in one readable line, and the retry policy;
- :mod:`.tokens`: token counts for the prompt inspector and the history budget;
- :mod:`.limits`: the bounds on one reply and its tool calls;
- :mod:`.model_probe`: an OpenAI-compatible server's model list (the model dialog's check)."""
