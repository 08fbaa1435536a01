# Augments group_commit.py when it is compiled (setup.py): the messages of a put are MessageExt extension types
# (message.pxd), so its loops (``cython.locals``) read and write their fields as C struct members, and encode each
# with record.py's ``encode_record`` called as a C function. A waiting put (``_Put``) is an extension type too, its
# results (results.pxd) set as struct members. It stays in the cyclic collector: its waiter (a send's answer) leads
# to the broker, which holds the store and its group of puts. Freed ones are reused (``cython.freelist`` on the
# class: Cython takes class directives from the .py).
cimport cython
from txmq.message cimport MessageExt
from txmq.store.dispatcher cimport build_index, builds_consume_queue
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
cdef object _after_durable_flush(list group, object replicated, object batch, object flushed=*, str remark=*)

# The group commit as an extension type: what a put and its group read are C struct members, and the steps of a
# put (encode, write, derive, notify, answer) C methods, so a send pays no instance-dict read and no Python-level
# call between them. ``put_messages`` is cpdef: a C call from the store (message_store.pxd).
cdef class GroupCommit:
    cdef public IndexService index
    cdef public object config, commit_log, queues, clock, confirm, disk, durability, replicate, flush_service
    cdef public object answer_batch
    cdef public bint replica, open, over_max_used
    cdef object _files_lock, _clean, _disk_checked_at, _early_clean_at, _group_drops
    cdef dict _queues_by_key, _counters, _group_offsets, _group_queues
    cdef public list append_listeners
    cdef list _dispatchers, _group, _group_msgs, _group_records

    cpdef object put_messages(self, object msgs, object answer=*, object waiter=*)
    @cython.locals(msg=MessageExt)
    cdef object _encode_put(self, object msgs, object fut, object answer)
    @cython.locals(msg=MessageExt, put=_Put)
    cdef object _write_group(self, list group, list msgs, list records, dict next_offsets, dict found)
    cdef object _await_durable(self, object end, list group)
    @cython.locals(msg=MessageExt)
    cdef object _build_derived(self, object start, list msgs, object now, dict next_offsets, dict found)
    cdef bint _writable(self)
