"""Master/slave replication of the CommitLog (RocketMQ 4.x HA stream, byte for byte).

`ha.codec` holds the sans-IO wire codecs and checks; the asyncio services drive them.

Beyond RocketMQ, the HA port can be guarded (`ha.transport`, keys in `ha.config`):
`haAllowedSlaveAddresses` (addresses or CIDR networks; a connection from elsewhere is closed
before a byte is read or sent, and logged) and `haTlsEnable` with `haTlsCertPath`,
`haTlsKeyPath` and `haTlsTrustCertPath` (the stream in TLS, both sides presenting certificates
that chain to the trusted CAs; the master verifies the slave's, the slave the master's chain and
address). Inside TLS the bytes are RocketMQ's HA stream, unchanged.
"""
