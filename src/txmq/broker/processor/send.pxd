# Augments send.py when it is compiled (setup.py): the processor and a send's answer (``_SendAnswer``, one per send)
# as extension types. The processor's per-send steps are C methods (``_send``, ``_inner``, ``_store``;
# ``store_message`` and the response cpdef, as the gRPC send and the answer call them), its broker a C member: no
# method lookup, no argument parsing and no instance-dict read per step. It has no instance dict, so its cpdef
# methods are C calls. The answer extends the transport's ``Reply`` (remoting/transport.pxd), its fields C struct
# members (Cython keeps free lists for base types only), its processor typed so its response is a C call. It stays
# in the cyclic collector: its processor leads to the broker and its store, which holds the put waiting on it.
cimport cython
from txmq.broker.stats cimport BrokerStats
from txmq.message cimport MessageExt, inner_message
from txmq.remoting.command cimport RemotingCommand
from txmq.remoting.transport cimport Reply
from txmq.store.results cimport PutMessageResult, is_stored

cdef class SendMessageProcessor:
    cdef public object broker

    @cython.locals(msg=MessageExt)
    cdef object _send(self, object conn, RemotingCommand cmd, object req)
    cpdef object store_message(self, MessageExt msg, object answer=*, object waiter=*)
    cdef object _store(self, MessageExt msg, bint half, object delay_level, object answer, object waiter)
    cdef MessageExt _inner(self, object h, object queue_id, object flag, object body, object props, object born_host)
    cpdef object _response(self, RemotingCommand cmd, MessageExt msg, PutMessageResult result)

cdef class _SendAnswer(Reply):
    cdef public object batch, kind, topic
    cdef public SendMessageProcessor processor
    cdef public MessageExt msg

# What every send asks of its message and connection, as C functions to the send path (they stay importable).
cpdef bint is_half(object properties)
cpdef str message_type(MessageExt msg, bint order)
cdef str _message_kind(bint half, object delay_level, bint order)
cpdef tuple peer_host(object conn)
