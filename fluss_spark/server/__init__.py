"""Server processes: the coordinator and the tablet servers, over a shared RPC layer."""
