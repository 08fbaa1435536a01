# Augments message.py when it is compiled (setup.py): Message and MessageExt as extension types, their fields C
# struct members that compiled modules cimporting them (the store, the send path) read and write without attribute
# lookups. The fields stay Python objects: the same values, and the same errors, as the interpreted classes. They
# stay in the cyclic collector: ``properties`` is a mutable dict anyone may fill.
cimport cython

cdef class Message:
    cdef public object body, flag, properties, topic, transaction_id
    cdef _init_message(self, topic, body, tags, keys, properties, flag)

cdef class MessageExt(Message):
    cdef public object body_crc, born_host, born_timestamp, commit_log_offset, prepared_transaction_offset
    cdef public object queue_id, queue_offset, reconsume_times, store_host, store_size, store_timestamp, sys_flag
    cdef _init_ext(self, queue_id, queue_offset, commit_log_offset, store_size, sys_flag, born_timestamp, born_host,
                   store_timestamp, store_host, reconsume_times, prepared_transaction_offset, body_crc)

# The send path's message (send.py's ``_inner``), a C call.
@cython.locals(m=MessageExt)
cpdef MessageExt inner_message(str topic, object body, dict properties, object flag, object queue_id, object sys_flag,
                               object born_timestamp, object born_host, object store_host, object reconsume_times)

# Called by the store's record encoding (record.py) as a C function, its message's fields read as struct members.
cpdef tuple message_parts(MessageExt m, bytes trailer=*)

# Per-message steps of ``message_parts``, C calls: the caches' lookups, the properties' string, the body's CRC.
cdef dict _packed_hosts, _topic_parts, _host_ids
cdef object _pack_head, _pack_host, _pack_offset, _pack_props_len, _crc32
cpdef bytes _packed_host(object host)
cpdef bytes _topic_part(str topic)
cpdef str properties_to_string(object props)
cpdef object body_crc(object body)
