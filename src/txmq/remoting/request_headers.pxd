# Augments request_headers.py when it is compiled (setup.py): the field spec as C attributes, read by the parse and
# write loops without attribute lookups. The .py stays the one source of the logic.
cimport cython
from txmq.remoting.headers cimport parse_bool, parse_int, parse_int32

cdef class Header:  # no fields: the base of the send header's extension type (request_headers.py)
    pass

cdef class _Field:
    cdef public object name, wire, alias, type, kind, parser, default, default_factory
    cdef public bint empty_is_absent, required

@cython.locals(f=_Field)
cpdef object _parse(object cls, tuple spec, object ext)

@cython.locals(f=_Field)
cpdef dict _write(object header, tuple spec)

cpdef object _parse_send(dict ext, tuple keys)

cpdef object _parse_end(dict ext)
