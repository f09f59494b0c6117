"""RocketMQ's request/response headers and JSON bodies, as typed Python objects."""
