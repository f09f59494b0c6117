"""RocketMQ 5's gRPC endpoint in the broker (the proxy's "local" mode): the
`apache.rocketmq.v2.MessagingService` that the official 5.x clients call, served on
`grpcServerPort` by grpcio's asyncio server and answered from this broker's own store and
managers. `protocol/` holds the `.proto` files and the modules generated from them.
"""
