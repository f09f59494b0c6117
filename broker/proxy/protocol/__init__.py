"""The RocketMQ 5 protocol (package apache.rocketmq.v2): `definition.proto` and `service.proto`,
and `definition_pb2` / `service_pb2` generated from them by `make install` (generate.py)."""
