"""Sockets: the client's request/response connection and the servers' event-loop RPC server."""
