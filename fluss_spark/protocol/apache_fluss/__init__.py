"""Apache Fluss 0.9.1's own wire protocol: protobuf messages, frames, record batches, errors."""
