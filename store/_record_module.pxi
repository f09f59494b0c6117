# store/record.py, imported at the first use by the compiled modules that call back into it
# (it imports them while it loads, to pick its twins).

cdef object _record_module = None


cdef object _record():
    """store/record.py, imported at first use (it imports this module)."""
    global _record_module
    if _record_module is None:
        from tidemq.store import record
        _record_module = record
    return _record_module
