"""The launchers and daemon entry points: `brokerd`, `namesrvd`, what both share (`daemon`),
the local cluster launcher `tidemq-cluster` (`cluster`, `cluster_access`, `secure_init`,
`pki`, `port_owner`).
"""
