"""Master/slave replication of the CommitLog (RocketMQ 4.x HA stream, byte for byte).

`ha.codec` holds the sans-IO wire codecs and checks; the asyncio services drive them.
"""
