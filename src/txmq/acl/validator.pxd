# Augments validator.py when it is compiled (setup.py): the gate as an extension type holding its store typed, so
# each request's ``identify`` and ``refusal`` are C calls (store.pxd), as are its own steps.
from txmq.acl.store cimport AuthStore

cdef class AccessValidator:
    cdef public AuthStore store
    cdef public object refusals

    cpdef object refusal(self, object user, object needs, str host)

cdef str host_of(str remote_address)
cdef str peer_host(object conn)
