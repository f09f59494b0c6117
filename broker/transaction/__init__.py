"""Transactional messages: half and op messages (messages), the pending table and the end of a
transaction (service), the broker's check of open transactions (check)."""
