# Objects made by writing their slots: a slots dataclass's fields found as member descriptors
# once, then each new object's slots written in place (cheaper than the class's __init__).
# Included by the modules that build such objects (client/remoting/_codec.pyx,
# broker/transaction/_records.pyx).

from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF

cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        const char* name
        int type
        Py_ssize_t offset
        int flags
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member

cdef extern from "structmember.h":
    int T_OBJECT_EX
    int READONLY


cdef bint _find_slots(object cls, tuple names, Py_ssize_t* offsets, bint plain_setattr):
    """Whether `cls` is a slots dataclass whose fields are `names`, in order, each a writable
    object slot, with no __post_init__ (with `plain_setattr`: and no __setattr__ of its own, on
    the class or its metaclass); the slots' offsets (from their member descriptors)."""
    import dataclasses
    if (
        not dataclasses.is_dataclass(cls)
        or tuple(f.name for f in dataclasses.fields(cls)) != names
        or hasattr(cls, "__post_init__")
    ):
        return False
    if plain_setattr and (
        cls.__setattr__ is not object.__setattr__ or type(cls).__setattr__ is not type.__setattr__
    ):
        return False
    for i in range(len(names)):
        descriptor = cls.__dict__.get(names[i])
        if type(descriptor).__name__ != "member_descriptor":
            return False
        member = (<PyMemberDescrObject*>descriptor).d_member
        if member.type != T_OBJECT_EX or member.flags & READONLY:
            return False
        offsets[i] = member.offset
    return True


cdef inline void _put_at(object obj, Py_ssize_t offset, object value) noexcept:
    """A field's value written in its slot of a new object (empty until now)."""
    Py_INCREF(value)
    (<PyObject**>((<char*><PyObject*>obj) + offset))[0] = <PyObject*>value
