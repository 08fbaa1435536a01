# Augments message_store.py when it is compiled (setup.py): the messages of a put are MessageExt extension types
# (message.pxd), so its loops (``cython.locals``) read and write their fields as C struct members, and encode each
# with record.py's ``encode_record`` called as a C function. A waiting put (``_Put``) is an extension type too, its
# results (results.pxd) set as struct members. It stays in the cyclic collector: its waiter (a send's answer) leads
# to the broker, which holds the store and its group of puts. Freed ones are reused (``cython.freelist`` on the
# class: Cython takes class directives from the .py).
from txmq.message cimport MessageExt
from txmq.store.record cimport encode_record
from txmq.store.results cimport AppendMessageResult, PutMessageResult

cdef class _Put:
    cdef public Py_ssize_t first, count, wrote
    cdef public object future, answer
    cdef public AppendMessageResult appended
