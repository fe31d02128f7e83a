"""Tasks and verifiers: the ``Task`` record, the ``Verifier`` protocol, built-in suites with
train/held-out splits (DESIGN.md §10). Suites are registered through ``register_tasks``.

The built-in suites (registered by the ``forge:tasks`` plugin, :mod:`forge_cli.builtin.tasks`):
``calc`` (:mod:`.calc`), ``kv-search`` (:mod:`.kvsearch`), ``files`` (:mod:`.files`),
``reasoning`` and ``qa`` (:mod:`.puzzles`). A user's JSONL tasks: :func:`.user.load_user_suite`.
Finding a suite by name: :mod:`.suites`.
How answers are compared: :mod:`.answers`; how splits are drawn: :mod:`.splits`.
"""
