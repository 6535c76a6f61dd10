"""The soul: the agent's prompt as data (kind 31120).

- :mod:`.template`: a soul's sections, read from the config, a file, or the built-in default;
- :mod:`.assembly`: a template assembled into the prompt from the caches (pure), recorded layer by layer in a
  :mod:`.prompt_record` (what the inspector shows);
- :mod:`.content`: the soul as the content of its event (``didactyl-soul/1`` JSON; docs/soul-event.md);
- :mod:`.lint`: what a template gets wrong that its own shape cannot show (run before every publish).

The event itself is the soul codec's (``agent/soul/codec.py``)."""
