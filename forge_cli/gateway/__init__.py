"""The gateway: an OpenAI/Anthropic-compatible HTTP server that records every call as exact tokens."""
