"""One module per ``forge`` command (or command group); each has ``register(app)``."""
