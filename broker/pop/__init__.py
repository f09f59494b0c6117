"""POP consumption in the broker (RocketMQ 5's POP_MESSAGE / ACK_MESSAGE /
CHANGE_MESSAGE_INVISIBLETIME, and the gRPC ReceiveMessage / AckMessage /
ChangeInvisibleDuration over them). Started: `ledger.py`, the revive bookkeeping; the design
is in the module docstring there."""
