"""The agent's task list: :class:`~.task_list.TaskList`, a small bounded value (one kind 30078 event, ``d = tasks``),
and :class:`~.task_list.TaskBook`, what the task tools change it through. The list is one of the agent's documents
(agent/documents: read, versioned and saved like the others); the tools are in ``agent/tools/tasks.py``."""
