"""The tools the model may call. Each is declared once with :func:`.registry.build_tool` (name, description and
schema come from the handler's signature and docstring) in its family's module — :mod:`.memory`,
:mod:`.self_context`, :mod:`.admin_context`, :mod:`.files`, :mod:`.tasks`, :mod:`.notes` — and offered in the
order :func:`.builtin.build_base_registry` lists them. Handlers receive a :class:`.context.AgentToolContext`
(injected, hidden from the schema). A new tool: a function in its family's module, added to that family's list."""
