# Augments store.py when it is compiled (setup.py): the users and ACLs as an extension type. Every request reads its
# view (``identify``, ``refusal``): C struct members instead of attribute lookups, and C calls from the validator
# (validator.pxd), to the file it re-reads (config.pxd) and to each ACL's decisions (model.pxd).
cimport cython
from txmq.acl.config cimport AclFile
from txmq.acl.model cimport Acl

cdef class AuthStore:
    cdef public AclFile acl_file
    cdef public object path
    cdef object _lock_fd, _file_config
    cdef dict _stored_users, _stored_acls, _users, _acls
    cdef tuple _white

    cdef _current(self)
    cpdef object identify(self, str host, str access_key, object check_signature)
    @cython.locals(acl=Acl)
    cpdef object refusal(self, object user, object needs, str host)
    cpdef object refusal_now(self, object user, object needs, str host)
