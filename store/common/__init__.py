"""The common layer, `tidemq.common`: what every package below the broker shares, and nothing of
theirs. It imports no other tidemq package (tests/unit/test_import_graph.py).

- `errors`: the root of the exception tree (`TideMQError`), `DecodeError`, `StoreError`,
  `ConfigError`, `StorePathError`.
- `lifecycle`: the `Service` base with ordered children, `BackgroundTask`, `cancel_and_wait`.
- `schema`: one schema for camelCase fields (headers, properties files, JSON bodies).
- `settings`: `setting()` and typed config objects read from properties.
- `files`: `write_file_safely`, `path_inside`, `fsync_dir`, `make_dirs`.
- `speedups`: which twin runs, the compiled or the pure-Python one.
- `accept`: the one accept loop of a listening socket (remoting and HA ports).

It lives in `store/common/` because the top level is fixed and store/ is the bottom folder:
packaging maps it to `tidemq.common`, not `tidemq.store.common`.
"""
