# The pure twins, for what a compiled fast path leaves to them (store/common/speedups.py keeps
# them in PURE_TWINS by "module.name"). Included by the compiled modules.

from tidemq.common.speedups import PURE_TWINS as _PURE_TWINS


cdef object _pure(str key):
    """The pure twin `key` (module.name), for what the fast paths leave to it."""
    return _PURE_TWINS[key]
