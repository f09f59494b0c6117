"""The client's side of remoting I/O: a connection to a broker or name server (asyncio
protocol over the sans-IO codec of `client.remoting`), the request client, the receive path
with its buffer pool, TLS client settings, and hand-stepped coroutines (`eager`).
"""
