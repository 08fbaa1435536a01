# Augments message_store.py when it is compiled (setup.py): the messages of a put are MessageExt extension types
# (message.pxd), so its loops (``cython.locals``) read and write their fields as C struct members, and encode each
# with record.py's ``encode_record`` called as a C function. A waiting put (``_Put``) is an extension type too, its
# results (results.pxd) set as struct members. It stays in the cyclic collector: its waiter (a send's answer) leads
# to the broker, which holds the store and its group of puts. Freed ones are reused (``cython.freelist`` on the
# class: Cython takes class directives from the .py).
cimport cython
from txmq.message cimport MessageExt
from txmq.store.dispatcher cimport builds_consume_queue, builds_index, keys_of
from txmq.store.index cimport IndexService
from txmq.store.record cimport encode_record
from txmq.store.results cimport AppendMessageResult, PutMessageResult

cdef class _Put:
    cdef public Py_ssize_t first, count, wrote
    cdef public object future, answer
    cdef public AppendMessageResult appended

    cpdef object settle(self, object result)

# A written group's answers, as C calls from the group commit down to each put's answer.
cdef object _settle(object fut, object answer, object result)
@cython.locals(put=_Put)
cdef object _answer_durable(list group, object status, str remark=*)
cdef object _after_durable_flush(list group, object replicated)

# The store as an extension type: what a put and its group commit read are C struct members, and the steps of a
# put (encode, write, derive, notify, answer) C methods, so a send pays no instance-dict read and no Python-level
# call between them. ``put_message`` and ``put_messages`` are cpdef: a C call from a typed caller, and still a
# lookup first, so one set on the instance (tests wrap them) is the one called. The instance keeps a dict
# (``__dict__``) for the fields nothing hot reads and for whatever is set on it.
cdef class DefaultMessageStore:
    cdef dict __dict__
    cdef public IndexService index
    cdef public object config, commit_log, replicate, _flush_service, _disk, _confirm_offset
    cdef public object _last_store_ts, _group_ts, _disk_checked_at
    cdef public bint replica, _open
    cdef public dict _queue_offsets, _counters, _group_offsets
    cdef public list _group, _group_msgs, _group_records, _dispatchers, _append_listeners, _arrival_listeners

    cpdef object put_message(self, object msg, object answer=*, object waiter=*)
    cpdef object put_messages(self, object msgs, object answer=*, object waiter=*)
    @cython.locals(msg=MessageExt)
    cdef object _encode_put(self, object msgs, object fut, object answer)
    @cython.locals(msg=MessageExt, put=_Put)
    cdef object _write_group(self, list group, list msgs, list records, dict next_offsets, object now)
    cdef object _await_durable(self, object end, list group)
    @cython.locals(msg=MessageExt)
    cdef object _build_derived(self, object start, list msgs, object now, dict next_offsets)
    cdef object _build_index(self, object topic, object sys_flag, object keys, object uniq_key, object offset,
                             object store_timestamp)
    cdef bint _writable(self)
    cdef object _notify(self, dict arrived, object end)
    cdef object _tell_arrivals(self, dict arrived)
