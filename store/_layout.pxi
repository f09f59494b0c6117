# The CommitLog record layout is store/layout.py's, read into C globals when a module including
# this loads (the one definition; tests/unit/test_import_graph.py fails on a copy). Included by
# the store's and the client's compiled readers of records.

from libc.stdint cimport int32_t

from tidemq.store import layout as _record_layout

cdef int32_t _MAGIC_V1 = _record_layout.MAGIC_V1
cdef int32_t _BLANK_MAGIC = _record_layout.BLANK_MAGIC
cdef Py_ssize_t _HEAD_SIZE = _record_layout.HEAD_V4_SIZE  # fixed head, IPv4 hosts
cdef Py_ssize_t _PREFIX_SIZE = _record_layout.PREFIX_SIZE  # fields 1-9
cdef Py_ssize_t _MIN_RECORD_SIZE = _record_layout.MIN_RECORD
cdef Py_ssize_t _MAX_TOPIC_BYTES = _record_layout.MAX_TOPIC_BYTES
cdef Py_ssize_t _MAX_PROPERTIES_BYTES = _record_layout.MAX_PROPERTIES_BYTES
cdef int32_t _FLAG_BORNHOST_V6 = _record_layout.FLAG_BORNHOST_V6
cdef int32_t _FLAG_STOREHOST_V6 = _record_layout.FLAG_STOREHOST_V6
cdef int32_t _FLAG_COMPRESSED = _record_layout.FLAG_COMPRESSED
cdef int32_t _TRANSACTION_MASK = _record_layout.TRANSACTION_MASK
cdef Py_ssize_t _HOST_V4_SIZE = _record_layout.HOST_V4_SIZE
cdef Py_ssize_t _HOST_V6_SIZE = _record_layout.HOST_V6_SIZE
cdef Py_ssize_t _OFFSET_MAGIC = _record_layout.OFFSET_MAGIC
cdef Py_ssize_t _OFFSET_BODY_CRC = _record_layout.OFFSET_BODY_CRC
cdef Py_ssize_t _OFFSET_QUEUE_ID = _record_layout.OFFSET_QUEUE_ID
cdef Py_ssize_t _OFFSET_FLAG = _record_layout.OFFSET_FLAG
cdef Py_ssize_t _OFFSET_QUEUE_OFFSET = _record_layout.OFFSET_QUEUE_OFFSET
cdef Py_ssize_t _OFFSET_PHYSICAL_OFFSET = _record_layout.OFFSET_PHYSICAL_OFFSET
cdef Py_ssize_t _OFFSET_SYS_FLAG = _record_layout.OFFSET_SYS_FLAG
cdef Py_ssize_t _OFFSET_BORN_TIMESTAMP = _record_layout.OFFSET_BORN_TIMESTAMP
cdef Py_ssize_t _OFFSET_BORN_HOST = _record_layout.OFFSET_BORN_HOST
cdef Py_ssize_t _OFFSET_STORE_TIMESTAMP_V4 = _record_layout.OFFSET_STORE_TIMESTAMP_V4
cdef Py_ssize_t _OFFSET_STORE_HOST_V4 = _record_layout.OFFSET_STORE_HOST_V4
cdef Py_ssize_t _OFFSET_RECONSUME_TIMES_V4 = _record_layout.OFFSET_RECONSUME_TIMES_V4
cdef Py_ssize_t _OFFSET_BODY_LENGTH_V4 = _record_layout.OFFSET_BODY_LENGTH_V4
