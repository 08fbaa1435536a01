# Augments transport.py when it is compiled (setup.py): a request's answer to come (``Reply``, one per send) as an
# extension type, its fields C struct members for its own methods and its subclasses (the send's answer,
# broker/processor/send.pxd). It stays in the cyclic collector: its connection leads back to what holds it. The
# connection's read loop (``_process``) types its frame decoder, so ``next_command`` is a C call per frame.
from txmq.remoting.codec cimport FrameDecoder
from txmq.remoting.command cimport RemotingCommand

cdef class Reply:
    cdef int _state
    cdef public RemotingCommand cmd
    cdef public object code, conn, observer
