"""Forge's built-in plugins. Each module is registered exactly like a third-party plugin."""
