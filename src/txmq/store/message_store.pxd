# Augments message_store.py when it is compiled (setup.py): the store as an extension type whose group commit
# (group_commit.pxd) is a typed field, so a put reaches it as a C call. ``put_message`` and ``put_messages`` are
# cpdef: a C call from a typed caller, and still a lookup first, so one set on the instance (tests wrap them) is
# the one called. The instance keeps a dict (``__dict__``) for the fields nothing hot reads and for whatever is set
# on it.
from txmq.store.group_commit cimport GroupCommit
from txmq.store.index cimport IndexService

cdef class DefaultMessageStore:
    cdef dict __dict__
    cdef public IndexService index
    cdef public GroupCommit group_commit
    cdef public object config, commit_log, queues, confirm, _flush_service
    cdef public bint _open
    cdef public dict _counters

    cpdef object put_message(self, object msg, object answer=*, object waiter=*)
    cpdef object put_messages(self, object msgs, object answer=*, object waiter=*)
