# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twins of a pull's scan (store/common/speedups.py picks a twin).

    scan_units         store/get_message.py         ConsumeQueue units into spans of the CommitLog
    PropertyPredicate  store/property_predicate.py  a condition on a record's properties (SQL92)

The pure twins are the reference (tests/unit/test_store_get_message.py,
tests/unit/test_property_predicate.py). A ConsumeQueue unit is 20 big-endian bytes: the record's
CommitLog offset (8), its size (4), its tags code (8). With a record filter that carries a
`predicate` of this module's PropertyPredicate (broker/sql92.py's filters), the scan tests each
record in place, in C, and calls the filter itself only for the records the predicate leaves
UNDECIDED. Records are found in the segment of the record before when they lie there (a
`_SegmentWindow`), not by a segment lookup and a view each: a tag filter that passes every
other record starts a span at each one.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.list cimport PyList_Append
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int32_t, int64_t
from libc.string cimport memcmp, memcpy

cdef extern from "Python.h":
    double PyOS_string_to_double(const char* s, char** endptr, object overflow) except? -1.0

include "common/_twins.pxi"
include "common/_bigendian.pxi"
include "_layout.pxi"
include "_properties.pxi"

cdef object _get_message_module = None
cdef enum:
    _CQ_UNIT = 20
    _BLANK_UNIT_SIZE = 0x7FFFFFFF


# --- PropertyPredicate: a condition on a record's properties (store/property_predicate.py) ---

cdef enum:
    # the tests of a condition
    _ALL = 1
    _ANY = 2
    _NOT = 3
    _CONST = 4
    _NULL = 5
    _PRESENT = 6
    _TEXT = 7
    _IN = 8
    _COMPARE = 9
    _BETWEEN = 10
    # compare's operators
    _LT = 1
    _LE = 2
    _GT = 3
    _GE = 4
    _EQ = 5
    # answers: three-valued, then the two that end the evaluation
    _FALSE = 0
    _TRUE = 1
    _UNKNOWN = 2
    _REFUSED = 3  # a value that does not read as a number: no match
    _UNDECIDED = 4  # left to the general evaluation
    _MAX_NAMES = 64
    _MAX_NUMBER_TEXT = 63
    _MAX_LONG_DIGITS = 18

_OPERATORS = {"<": _LT, "<=": _LE, ">": _GT, ">=": _GE, "=": _EQ}


cdef struct _Test:
    int kind
    int name  # index of the property in the predicate's names
    int op
    bint negate
    bint is_double
    bint flag  # const's value
    int64_t low_long
    int64_t high_long
    double low_double
    double high_double
    Py_ssize_t end  # the index after this test and its parts
    Py_ssize_t texts  # index in _texts of the bytes (text) or the tuple of bytes (in)


cdef struct _Lookup:
    const unsigned char* props
    Py_ssize_t props_len  # -1: the record has no properties
    Py_ssize_t begin[_MAX_NAMES]  # -2: not looked up yet, -1: missing
    Py_ssize_t stop[_MAX_NAMES]


cdef bint _has_high_byte(const unsigned char* p, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        if p[i] > 0x7F:
            return True
    return False


cdef int _read_long(const unsigned char* p, Py_ssize_t n, int64_t* out) noexcept nogil:
    """_TRUE with the value in `out`, _REFUSED or _UNDECIDED (property_predicate._read_long)."""
    cdef Py_ssize_t i = 0
    cdef bint negative = False
    cdef int64_t value = 0
    if _has_high_byte(p, n):
        return _UNDECIDED
    if n and (p[0] == 43 or p[0] == 45):  # + -
        negative = p[0] == 45
        i = 1
    if i == n:
        return _REFUSED
    for j in range(i, n):
        if p[j] < 48 or p[j] > 57:
            return _REFUSED
    if n - i > _MAX_LONG_DIGITS:
        return _UNDECIDED
    while i < n:
        value = value * 10 + (p[i] - 48)
        i += 1
    out[0] = -value if negative else value
    return _TRUE


cdef int _read_double(const unsigned char* p, Py_ssize_t n, double* out):
    """_TRUE with the value in `out`, _REFUSED or _UNDECIDED (property_predicate._read_double)."""
    cdef Py_ssize_t i = 0, digits = 0, dots = 0
    cdef char text[_MAX_NUMBER_TEXT + 1]
    if n == 0:
        return _REFUSED
    if n > _MAX_NUMBER_TEXT:
        return _UNDECIDED
    if p[0] == 43 or p[0] == 45:
        i = 1
    while i < n:
        if 48 <= p[i] <= 57:
            digits += 1
        elif p[i] == 46 and dots == 0:  # the first .
            dots = 1
        else:
            return _UNDECIDED
        i += 1
    if digits == 0:
        return _UNDECIDED
    memcpy(text, p, n)
    text[n] = 0
    out[0] = PyOS_string_to_double(text, NULL, None)
    return _TRUE


cdef class PropertyPredicate:
    """A condition (store/property_predicate.py's tree) on the properties of whole records."""

    cdef _Test* _tests
    cdef Py_ssize_t _count
    cdef list _texts  # bytes and tuples of bytes the tests compare with
    cdef list _needles  # b"name\\x01" of each name
    cdef readonly object condition
    cdef readonly tuple names

    def __cinit__(self):
        self._tests = NULL

    def __init__(self, condition):
        # the pure twin checks the tree and collects the names in the same order
        checked = _pure("tidemq.store.property_predicate.PropertyPredicate")(condition)
        self.condition = condition
        self.names = checked.names
        self._needles = [name.encode() + b"\x01" for name in self.names]
        self._texts = []
        self._count = _count_tests(condition)
        self._tests = <_Test*>PyMem_Malloc(self._count * sizeof(_Test))
        if self._tests == NULL:
            raise MemoryError()
        index = {name: i for i, name in enumerate(self.names)}
        self._fill(condition, 0, index)

    def __dealloc__(self):
        PyMem_Free(self._tests)

    cdef Py_ssize_t _fill(self, tuple condition, Py_ssize_t at, dict index) except -1:
        """Writes `condition` at `at` and its parts after it; the index after them."""
        cdef _Test* test = &self._tests[at]
        cdef Py_ssize_t next_at = at + 1
        kind = condition[0]
        test.negate = test.is_double = test.flag = False
        test.name = test.op = 0
        test.texts = -1
        test.low_long = test.high_long = 0
        test.low_double = test.high_double = 0.0
        if kind == "all" or kind == "any":
            test.kind = _ALL if kind == "all" else _ANY
            for part in condition[1]:
                next_at = self._fill(part, next_at, index)
        elif kind == "not":
            test.kind = _NOT
            next_at = self._fill(condition[1], next_at, index)
        elif kind == "const":
            test.kind = _CONST
            test.flag = condition[1]
        else:
            test.name = index[condition[1]]
            if kind == "null":
                test.kind = _NULL
            elif kind == "present":
                test.kind = _PRESENT
            elif kind == "text" or kind == "in":
                test.kind = _TEXT if kind == "text" else _IN
                test.texts = len(self._texts)
                self._texts.append(condition[2])
            elif kind == "compare":
                test.kind = _COMPARE
                test.op = _OPERATORS[condition[2]]
                self._bounds(test, condition[3], condition[3])
            else:
                test.kind = _BETWEEN
                self._bounds(test, condition[2], condition[3])
                test.negate = condition[4]
        self._tests[at].end = next_at
        return next_at

    cdef int _bounds(self, _Test* test, low, high) except -1:
        test.is_double = type(low) is float
        if test.is_double:
            test.low_double, test.high_double = low, high
        else:
            test.low_long, test.high_long = low, high
        return 0

    def test(self, record):
        """MATCH (1), NO_MATCH (0) or UNDECIDED (-1) for one whole record."""
        cdef Py_buffer buf
        PyObject_GetBuffer(record, &buf, PyBUF_SIMPLE)
        try:
            return self._test(<const unsigned char*>buf.buf, buf.len)
        finally:
            PyBuffer_Release(&buf)

    cdef int _test(self, const unsigned char* p, Py_ssize_t size) except -2:
        cdef _Lookup lookup
        cdef Py_ssize_t i, props_at, props_len = 0
        cdef int answer
        props_at = _record_properties(p, size, &props_len)
        lookup.props = p + props_at if props_at >= 0 else p
        lookup.props_len = props_len if props_at >= 0 else -1
        for i in range(len(self.names)):
            lookup.begin[i] = -2
        answer = self._evaluate(0, &lookup)
        if answer == _TRUE:
            return 1
        if answer == _UNDECIDED:
            return -1
        return 0

    cdef bint _value(self, int name, _Lookup* lookup, const unsigned char** value, Py_ssize_t* n):
        cdef Py_ssize_t begin = lookup.begin[name]
        cdef bytes needle
        if begin == -2:
            begin = -1
            if lookup.props_len > 0:
                needle = <bytes>self._needles[name]
                begin = _find_value(
                    lookup.props,
                    <const unsigned char*>PyBytes_AS_STRING(needle),
                    PyBytes_GET_SIZE(needle),
                    0,
                    lookup.props_len,
                    &lookup.stop[name],
                )
            lookup.begin[name] = begin
        if begin < 0:
            return False
        value[0] = lookup.props + begin
        n[0] = lookup.stop[name] - begin
        return True

    cdef int _evaluate(self, Py_ssize_t at, _Lookup* lookup) except -1:
        cdef _Test* test = &self._tests[at]
        cdef int kind = test.kind, answer, stop
        cdef bint unknown = False
        cdef Py_ssize_t part, n = 0
        cdef const unsigned char* value = NULL
        cdef int64_t number_long = 0
        cdef double number_double = 0.0
        if kind == _ALL or kind == _ANY:
            stop = _FALSE if kind == _ALL else _TRUE
            part = at + 1
            while part < test.end:
                answer = self._evaluate(part, lookup)
                if answer == stop or answer >= _REFUSED:
                    return answer
                if answer == _UNKNOWN:
                    unknown = True
                part = self._tests[part].end
            if unknown:
                return _UNKNOWN
            return _TRUE if kind == _ALL else _FALSE
        if kind == _NOT:
            answer = self._evaluate(at + 1, lookup)
            if answer == _TRUE:
                return _FALSE
            if answer == _FALSE:
                return _TRUE
            return answer
        if kind == _CONST:
            return _TRUE if test.flag else _FALSE
        if not self._value(test.name, lookup, &value, &n):
            return _TRUE if kind == _NULL else _UNKNOWN
        if kind == _NULL or kind == _PRESENT:
            return _FALSE
        if kind == _TEXT:
            return _texts_answer(value, n, (self._texts[test.texts],))
        if kind == _IN:
            return _texts_answer(value, n, <tuple>self._texts[test.texts])
        if test.is_double:
            answer = _read_double(value, n, &number_double)
            if answer != _TRUE:
                return answer
            if kind == _BETWEEN:
                if test.negate:
                    return number_double < test.low_double or number_double > test.high_double
                return test.low_double <= number_double <= test.high_double
            return _ordered(
                (number_double > test.low_double) - (number_double < test.low_double), test.op
            )
        answer = _read_long(value, n, &number_long)
        if answer != _TRUE:
            return answer
        if kind == _BETWEEN:
            if test.negate:
                return number_long < test.low_long or number_long > test.high_long
            return test.low_long <= number_long <= test.high_long
        return _ordered((number_long > test.low_long) - (number_long < test.low_long), test.op)


cdef inline int _ordered(int order, int op) noexcept nogil:
    if op == _LT:
        return order < 0
    if op == _LE:
        return order <= 0
    if op == _GT:
        return order > 0
    if op == _GE:
        return order >= 0
    return order == 0


cdef int _texts_answer(const unsigned char* value, Py_ssize_t n, tuple texts) except -1:
    """_TRUE when `value` is one of `texts`' bytes, _FALSE when not and it is ASCII (then no
    decoding could make it one), else _UNDECIDED."""
    cdef bytes text
    for item in texts:
        text = <bytes>item
        if PyBytes_GET_SIZE(text) == n and memcmp(PyBytes_AS_STRING(text), value, n) == 0:
            return _TRUE
    return _UNDECIDED if _has_high_byte(value, n) else _FALSE


cdef Py_ssize_t _count_tests(tuple condition) except -1:
    kind = condition[0]
    if kind == "all" or kind == "any":
        return 1 + sum([_count_tests(part) for part in condition[1]])
    if kind == "not":
        return 1 + _count_tests(condition[1])
    return 1


cdef class _SegmentWindow:
    """The CommitLog segment a scan last read a record from, held open (its buffer) with how
    far it was readable then: the next records of a queue usually lie there."""

    cdef object segment
    cdef object view
    cdef Py_buffer buf
    cdef bint held
    cdef long long start, limit

    def __cinit__(self):
        self.held = False

    def __dealloc__(self):
        if self.held:  # a scan that raised: its buffer goes with it
            PyBuffer_Release(&self.buf)

    cdef void release(self) noexcept:
        if self.held:
            PyBuffer_Release(&self.buf)
            self.held = False
        self.view = None

    cdef const unsigned char* record(self, commitlog, long long phy, long long size) except? NULL:
        """The record [phy, phy + size) in place, or NULL where Segment.select gives None
        (`segment` is then what the segments' find gave, None included)."""
        if self.held and phy >= self.start and phy + size <= self.limit:
            return <const unsigned char*>self.buf.buf + (phy - self.start)
        self.release()
        self.segment = commitlog.segments.find(phy)
        if self.segment is None:
            return NULL
        self.start = self.segment.start_offset
        self.limit = self.start + self.segment.read_position
        if phy < self.start or phy + size > self.limit:
            return NULL
        self.view = self.segment.view
        PyObject_GetBuffer(self.view, &self.buf, PyBUF_SIMPLE)
        self.held = True
        return <const unsigned char*>self.buf.buf + (phy - self.start)

    cdef object select(self, long long phy, long long size):
        """The record's own view, as Segment.select gives it."""
        return self.view[phy - self.start : phy - self.start + size]


def scan_units(
    result, units, offset, max_msg_nums, tag_filter, commitlog, limits, record_filter
):
    """The pure twin's loop with the units read in place and the counters in C; spans, segment
    lookups, tag and record filters are the same Python calls, made as rarely as there."""
    global _get_message_module
    cdef Py_buffer view
    if _get_message_module is None:
        from tidemq.store import get_message
        _get_message_module = get_message
    PyObject_GetBuffer(units, &view, PyBUF_SIMPLE)
    try:
        if view.len % _CQ_UNIT:
            return _pure("tidemq.store.get_message.scan_units")(
                result, units, offset, max_msg_nums, tag_filter, commitlog, limits, record_filter
            )
        _scan_unit_view(
            result, <const unsigned char*>view.buf, view.len // _CQ_UNIT, offset,
            max_msg_nums, tag_filter, commitlog, limits, record_filter,
        )
    finally:
        PyBuffer_Release(&view)


cdef int _scan_unit_view(
    result, const unsigned char* data, Py_ssize_t n_units, long long offset,
    long long max_msg_nums, tag_filter, commitlog, limits, record_filter,
) except -1:
    module = _get_message_module
    statuses = module.GetMessageStatus
    close_span = module._close_span
    cdef long long commitlog_max = commitlog.max_offset
    cdef long long memory_bytes = limits.memory_bytes
    cdef long long on_disk_below = commitlog_max - memory_bytes
    cdef long long bytes_in_disk = limits.bytes_in_disk
    cdef long long bytes_in_memory = limits.bytes_in_memory
    cdef long long count_in_memory = min(max_msg_nums, <long long>limits.count_in_memory)
    cdef long long count_on_disk = min(max_msg_nums, <long long>limits.count_in_disk)
    cdef bint match_all = tag_filter.matches_all
    cdef bint filtering_records = record_filter is not None
    cdef long long next_file_start = -1, max_phy_pulled = 0, scanned = 0, total = 0, count = 0
    cdef long long phy, tags_code, span_start = 0, span_end = 0, span_limit = 0
    cdef long long span_records = 0
    cdef int32_t size
    cdef Py_ssize_t i
    cdef const unsigned char* p
    cdef list sizes = result.sizes
    cdef list queue_offsets = result.queue_offsets
    cdef bint readable = False
    cdef int answer
    cdef const unsigned char* in_place
    cdef PropertyPredicate predicate = None
    # where records are read (Segment.select's answers), unless a record filter without a
    # predicate is given each one as a view
    cdef _SegmentWindow window = _SegmentWindow()
    cdef bint windowed = True
    if filtering_records:
        found = getattr(record_filter, "predicate", None)
        if isinstance(found, PropertyPredicate):
            predicate = <PropertyPredicate>found
        else:
            windowed = False
    span_segment = None
    segment = record = None
    result.status = statuses.NO_MATCHED_MESSAGE
    for i in range(n_units):
        p = data + i * _CQ_UNIT
        phy = _i64(p)
        size = _i32(p + 8)
        if size == _BLANK_UNIT_SIZE:
            scanned += 1
            continue
        max_phy_pulled = phy
        if next_file_start != -1 and phy < next_file_start:
            scanned += 1
            continue
        if total != 0 and count != 0:
            if phy < on_disk_below:
                if count >= count_on_disk or total + size > bytes_in_disk:
                    break
            elif count >= count_in_memory or total + size > bytes_in_memory:
                break
        scanned += 1
        if not match_all:
            tags_code = _i64(p + 12)
            if not tag_filter.match_code(tags_code):
                continue
        if filtering_records and size > 0:
            if predicate is not None:
                # Segment.select's answer, from the segment of the record before when it can
                in_place = window.record(commitlog, phy, size)
                segment, readable = window.segment, in_place != NULL
                if readable:
                    answer = predicate._test(in_place, size)
                    if answer == 0:
                        continue
                    if answer < 0 and not record_filter(window.select(phy, size)):
                        continue
            else:
                segment = commitlog.segments.find(phy)
                record = (
                    None if segment is None else segment.select(phy - segment.start_offset, size)
                )
                readable = record is not None
                if readable and not record_filter(record):
                    continue
        if phy == span_end and size > 0 and phy + size <= span_limit:
            span_end += size
            span_records += 1
        else:
            if size <= 0:
                segment = commitlog.segments.find(phy)
                record = None if segment is None else segment.select(phy - segment.start_offset, size)
                readable = record is not None
            elif not filtering_records:  # else the filter's look found it
                in_place = window.record(commitlog, phy, size)
                segment, readable = window.segment, in_place != NULL
            if segment is None or not readable:
                if count == 0:
                    result.status = statuses.MESSAGE_WAS_REMOVING
                next_file_start = commitlog.next_segment_offset(phy)
                continue
            if span_segment is not None:
                close_span(result, span_segment, span_start, span_end, span_records)
            if size > 0:
                span_segment = segment
                span_start, span_end, span_records = phy, phy + size, 1
                if windowed:  # how far the segment was readable when the window opened on it
                    span_limit = window.limit
                else:
                    span_limit = segment.start_offset + segment.read_position
            else:  # a damaged unit: its record stands alone, as the segment gave it
                result.spans.append(record)
                result.span_counts.append(1)
                span_segment = None
                span_end = span_limit = -1
        PyList_Append(sizes, size)
        PyList_Append(queue_offsets, offset + scanned - 1)
        total += size
        if count == 0:
            result.status = statuses.FOUND
        count += 1
        next_file_start = -1
    window.release()
    if span_segment is not None:
        close_span(result, span_segment, span_start, span_end, span_records)
    result.buffer_total_size = total
    result.next_begin_offset = offset + scanned
    result.suggest_pulling_from_slave = commitlog_max - max_phy_pulled > memory_bytes
    return 0

