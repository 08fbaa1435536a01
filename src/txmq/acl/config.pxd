# Augments config.py when it is compiled (setup.py): the file a broker's users come from, as an extension type whose
# fields are C struct members, so the request path's look at it (``current``: one clock compare) is a C call from
# the store (store.pxd).
cdef class AclFile:
    cdef public object path, config
    cdef public double check_interval_s
    cdef object _stamp
    cdef double _next_check

    cpdef object current(self, double now)
