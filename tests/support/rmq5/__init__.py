"""Scripts run by the official RocketMQ 5 Python client (`rocketmq-python-client` from PyPI) in
a virtual environment of its own, `.venv-rmq5` (made by `make install`: its grpcio and
protobuf pins are not ours). The tests start them as processes and read one JSON line."""
