"""The consumers: push (`push`) and pull (`pull`), and their parts: queue allocation, the
offset store, the process queue, consume threads and statistics, the decoding of received
messages, and the pull loop (`pulling`).
"""
