# Augments stats.py when it is compiled (setup.py): the counters as extension types, so a send's count (``put``, a
# C method the send's answer calls with its stats typed, broker/processor/send.pxd) reads and bumps C struct members:
# no attribute lookups, no method lookup, no argument parsing. No instance dict: a cpdef method of a type with one
# looks itself up on the instance before every call.
cimport cython

cdef class TopicPut:
    cdef public long long messages, bytes
    cdef public list size_buckets

cdef class GroupGet:
    cdef public long long messages, bytes

cdef class BrokerStats:
    cdef public dict puts, gets, dlq, pulled
    cdef public tuple _samples
    cdef public long long _ticks
    cdef public Py_ssize_t max_entries

    @cython.locals(entry=TopicPut)
    cpdef put(self, str topic, str message_type, Py_ssize_t size, Py_ssize_t count=*)

cdef Py_ssize_t _size_bucket(Py_ssize_t size)
