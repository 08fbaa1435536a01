# Augments results.py when it is compiled (setup.py): a put's two results as extension types, C structs whose
# fields the store sets and the send path reads without attribute lookups. Neither can be part of a reference
# cycle, so neither is tracked by the cyclic collector (``no_gc``): an AppendMessageResult holds C integers and a
# str; a PutMessageResult holds a PutMessageStatus member (its name and value strings, its class), a str and an
# AppendMessageResult, none of which can lead back to it. Freed ones are reused (``freelist``): one of each per put.
# Those directives go on the classes in results.py (Cython takes them from there).
cdef class AppendMessageResult:
    # in the dataclass's field order (results.py): Cython's dataclass takes its fields' order from here
    cdef public long long wrote_offset, wrote_bytes
    cdef public str msg_id
    cdef public long long store_timestamp, logics_offset, msg_num

cdef class PutMessageResult:
    cdef public object status
    cdef public AppendMessageResult append_result
    cdef public str remark

# PutMessageResult.stored as a C function (the property is an attribute lookup and a call from compiled code)
cpdef bint is_stored(PutMessageResult result)
