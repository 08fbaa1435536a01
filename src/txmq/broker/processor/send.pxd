# Augments send.py when it is compiled (setup.py): a send's answer (``_SendAnswer``, one per send) as an extension
# type extending the transport's ``Reply`` (remoting/transport.pxd), its fields C struct members (Cython keeps free
# lists for base types only). It stays in the cyclic collector: its processor leads to the broker and its store,
# which holds the put waiting on it.
from txmq.message cimport MessageExt
from txmq.remoting.transport cimport Reply

cdef class _SendAnswer(Reply):
    cdef public object batch, kind, processor, topic
    cdef public MessageExt msg

# What every send asks of its message and connection, as C functions to the send path (they stay importable).
cpdef bint is_half(object properties)
cpdef str message_type(MessageExt msg, bint order)
cpdef tuple peer_host(object conn)
