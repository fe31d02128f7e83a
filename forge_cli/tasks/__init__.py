"""Tasks and verifiers: the ``Task`` record, the ``Verifier`` protocol, built-in suites with
train/held-out splits (DESIGN.md §10). Suites are registered through ``register_tasks``."""
