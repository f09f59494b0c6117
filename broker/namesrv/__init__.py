"""The name server (RocketMQ's namesrv): brokers register their topics, clients ask for routes.

- `route_info`: the routing tables and their rules, pure logic (`RouteInfoManager`).
- `kv_config`: the in-memory KV configuration (order topic configs).
- `processor`: one handler per request code.
- `server`: the `NameServer` service (remoting server + handlers + expiry scan).
- `main`: the `namesrvd` command (`python -m broker.namesrv`).
"""
