# Augments model.py when it is compiled (setup.py): what every request under ACL builds (``Needs``) and reads (an
# ``Acl``'s remembered decisions and its ``PolicyIndex``) as extension types, their fields C struct members and
# ``allows``/``best`` C calls from the store (store.pxd).
cimport cython

cdef class PolicyIndex:
    cdef public tuple tiers

    @cython.locals(literal=dict, patterns=tuple)
    cpdef object best(self, object wanted, object any_of, str host)

cdef class Acl:
    cdef public str username
    cdef public dict policies
    cdef PolicyIndex _index
    cdef dict _decisions

    cpdef bint allows(self, object wanted, object any_of, str host)

cdef class Needs:
    cdef public list wants
