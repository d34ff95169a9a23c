"""The client: connections, admin, writer, log scanner and KV scan pager."""
