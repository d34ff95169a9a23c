"""The wire protocol: API keys, msgpack message codec, framing and Arrow payloads (no sockets)."""
