"""Helpers shared by the integration and fault tests: real daemons on loopback ports."""
