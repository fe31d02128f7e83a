"""Built-in tool-call formats (registered by the plugin ``forge:tool-formats``)."""
