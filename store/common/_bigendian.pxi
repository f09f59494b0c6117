# The compiled tier's big-endian field readers and writers, included by every .pyx that reads
# records, frames or index files (one text, compiled into each module as static inline C).
# The store's typed forms first, then the remoting codec's and the consumers' (long long).

from libc.stdint cimport int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t


cdef inline uint32_t _u32(const unsigned char* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef inline int32_t _i32(const unsigned char* p) noexcept nogil:
    return <int32_t>_u32(p)


cdef inline int64_t _i64(const unsigned char* p) noexcept nogil:
    return <int64_t>((<uint64_t>_u32(p) << 32) | _u32(p + 4))


cdef inline int16_t _i16(const unsigned char* p) noexcept nogil:
    return <int16_t>((<uint16_t>p[0] << 8) | p[1])


cdef inline void _put32(unsigned char* p, uint32_t v) noexcept nogil:
    p[0] = v >> 24
    p[1] = v >> 16
    p[2] = v >> 8
    p[3] = v


cdef inline void _put64(unsigned char* p, uint64_t v) noexcept nogil:
    _put32(p, <uint32_t>(v >> 32))
    _put32(p + 4, <uint32_t>v)


cdef inline long long _be32(const unsigned char* p) noexcept:
    return (<long long>p[0] << 24) | (<long long>p[1] << 16) | (<long long>p[2] << 8) | p[3]


cdef inline long long _be64(const unsigned char* p) noexcept:
    return <long long>((<unsigned long long>_be32(p) << 32) | <unsigned long long>_be32(p + 4))


cdef inline long long _i32_at(const unsigned char* p) noexcept:
    cdef long long value = _be32(p)
    return value - 0x100000000 if value >= 0x80000000 else value
