"""Access control: RocketMQ's plain ACL (rules, address patterns, the request validator and the
file watcher), the broker's own signing account, and the HA authentication of slaves.
"""
