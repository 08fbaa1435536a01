# Augments index.py when it is compiled (setup.py): an index file's fields as C attributes and its map as a typed
# view, so a put (one per stored message) is C arithmetic and C stores. The .py stays the one source of the logic.
cimport cython

cdef class IndexFile:
    cdef public object path, mm
    cdef public int fd
    cdef public long long hash_slot_num, index_num, index_count, begin_ts, end_ts, begin_phy, end_phy, _allocated
    cdef public bint dirty
    cdef unsigned char[::1] _view

    @cython.locals(slot_pos=Py_ssize_t, pos=Py_ssize_t, prev=cython.longlong, index=cython.longlong,
                   time_diff=cython.longlong)
    cpdef put_key(self, long long h, long long phy, long long store_ts)
    cpdef Py_ssize_t _entry_pos(self, long long index)

cdef class IndexService:
    cdef public object directory, files
    cdef public long long hash_slot_num, index_num

    cpdef put(self, str topic, list keys, long long phy, long long store_ts)
    cpdef IndexFile _put_keys(self, IndexFile f, str topic, list keys, long long phy, long long store_ts)

cdef void _store_int(unsigned char[::1] view, Py_ssize_t pos, long long value)

@cython.locals(value=cython.longlong)
cdef long long _load_int(unsigned char[::1] view, Py_ssize_t pos)
