"""Running scaffolds on tasks (DESIGN §7, §10).

- :mod:`forge_cli.rollout.loop` — the white-box loop contract: the :class:`~forge_cli.rollout.loop.Episode`
  a loop is handed (the trajectory's gateway URL and key, the task, the scaffold's validated
  options, its tools and context policy), how a scaffold's ``loop`` reference resolves to code,
  and :func:`~forge_cli.rollout.loop.run_episode`, which runs one episode of a scaffold.
- :mod:`forge_cli.rollout.context` — the one table of context-policy names and their options.

Importing this package is cheap (no torch, no OpenAI client); the client is imported when an
episode asks for it.
"""

from __future__ import annotations
