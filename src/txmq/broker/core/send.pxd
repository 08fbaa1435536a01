# Augments send.py when it is compiled (setup.py): the send service as an extension type whose steps are C methods
# (cpdef: the remoting send processor, broker/processor/send.pxd, cimports them and calls each as a C call; the gRPC
# servicer calls the same methods as Python ones). Its stats are typed, so a gRPC send's count is a C call too.
cimport cython
from txmq.broker.stats cimport BrokerStats
from txmq.message cimport MessageExt
from txmq.store.results cimport is_stored

cdef class SendService:
    cdef public object config, store, topics, manager, transactions, schedule, timers, retries
    cdef public BrokerStats stats
    cdef public bint writeable

    cpdef object topic_of(self, object topic, Py_ssize_t size, bint batch, object create_from)
    cpdef object queue_of(self, object cfg, object queue_id)
    cpdef object accept(self, MessageExt msg, bint half, bint born_given=*)
    cpdef object accept_batch(self, list entries, dict batch_props, object born_timestamp, object sys_flag)
    cdef object _half_batch_refusal(self, list entries, dict batch_props, Py_ssize_t halves)
    cdef object _rejected_transaction(self)
    cdef object _timer_refusal(self, MessageExt msg, bint half)
    cpdef object route_retry(self, MessageExt msg, object max_times)
    cpdef object put(self, MessageExt msg, bint half, object delay_level, object answer=*, object waiter=*)
    cpdef object put_counted(self, MessageExt msg, bint half, object delay_level, str kind)
    cpdef object put_batch(self, list msgs, Py_ssize_t halves, object answer, object waiter)
    cpdef object put_half_batch(self, MessageExt msg, Py_ssize_t count, object answer)

cdef class _Counted:
    cdef public BrokerStats stats
    cdef public object topic, kind, size

# What every send asks of its message, as C functions to the send path (they stay importable).
cpdef bint is_half(object properties)
cpdef bint is_timed(object properties)
cpdef str message_kind(bint half, object delay_level, bint order, bint timer=*)
cpdef object reserved_refusal(object props)
cpdef object born_refusal(object born_timestamp)
