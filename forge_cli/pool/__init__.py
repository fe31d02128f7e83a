"""The data pool: durable storage of trajectories (:mod:`.store`), the records it holds
(:mod:`.types`, the contracts layer), and the schedulers that feed the trainer (:mod:`.scheduler`).

This ``__init__`` imports nothing: ``pool.types`` is a contract the plugin host and the rewards
read, and importing it must not bring the store with it.
"""
