# Java's String.hashCode over text and UTF-8 bytes, the steps shared by the compiled hashes
# (store/_hashing.pyx) and the index entries' key hashes (store/_fast_scan.pyx).

cdef inline object _signed(uint32_t h):
    return <int32_t>h


cdef inline uint32_t _hash_ascii(const unsigned char* data, Py_ssize_t n, uint32_t h) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        h = h * 31 + data[i]
    return h


cdef inline bint _is_ascii(const unsigned char* data, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        if data[i] & 0x80:
            return False
    return True


cdef uint32_t _hash_text(str text, uint32_t h, Py_ssize_t* units):
    """Continue `h` over the UTF-16 code units of `text`; add their count to units[0]."""
    cdef Py_UCS4 ch
    cdef uint32_t cp
    cdef Py_ssize_t n = 0
    for ch in text:
        cp = ch
        if cp >= 0x10000:
            cp -= 0x10000
            h = h * 31 + (0xD800 + (cp >> 10))
            h = h * 31 + (0xDC00 + (cp & 0x3FF))
            n += 2
        else:
            h = h * 31 + cp
            n += 1
    units[0] += n
    return h


cdef inline uint32_t _pow31(Py_ssize_t n) noexcept nogil:
    cdef uint32_t result = 1
    cdef uint32_t base = 31
    while n:
        if n & 1:
            result *= base
        base *= base
        n >>= 1
    return result
