# Augments send.py when it is compiled (setup.py): the processor and a send's answer (``_SendAnswer``, one per send)
# as extension types. The processor's per-send steps are C methods (``_send``, ``_inner``; the response cpdef, as
# the answer calls it), its core send service and stats C members typed by their own .pxd, so each of the core's
# steps (broker/core/send.pxd) and the count are C calls: no method lookup, no argument parsing and no
# instance-dict read per step. The answer extends the transport's ``Reply`` (remoting/transport.pxd), its fields C
# struct members (Cython keeps free lists for base types only), its processor typed so its response is a C call. It
# stays in the cyclic collector: its processor leads to the broker and its store, which holds the put waiting on it.
cimport cython
from txmq.broker.core.send cimport SendService, is_half, is_timed, message_kind
from txmq.broker.stats cimport BrokerStats
from txmq.message cimport MessageExt, inner_message
from txmq.remoting.command cimport RemotingCommand
from txmq.remoting.transport cimport Reply
from txmq.store.results cimport PutMessageResult, is_stored

cdef class SendMessageProcessor:
    cdef public object broker, store_host
    cdef public SendService sends
    cdef public BrokerStats stats

    @cython.locals(msg=MessageExt, first=MessageExt)
    cdef object _send(self, object conn, RemotingCommand cmd, object req)
    cdef MessageExt _inner(self, object h, object topic, object queue_id, object flag, object body, object props, object born_host)
    cpdef object _response(self, RemotingCommand cmd, MessageExt msg, PutMessageResult result)

cdef class _SendAnswer(Reply):
    cdef public object batch, dead_letters, kind, topic
    cdef public SendMessageProcessor processor
    cdef public MessageExt msg

# What every send asks of its connection, as a C function to the send path (it stays importable).
cpdef tuple peer_host(object conn)
