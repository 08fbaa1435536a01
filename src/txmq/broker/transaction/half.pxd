# Augments half.py when it is compiled (setup.py): every transaction builds its half message and its real message
# here, the messages' fields read as struct members and ``inner_message`` called as a C function.
cimport cython
from txmq.message cimport MessageExt, inner_message

cdef object _HALF_ONLY, _REAL_TOPIC, _REAL_QUEUE_ID, _PREPARED_QUEUE_OFFSET, _NOT_TYPE, _COMMIT_TYPE
cdef object _NOT_TRANSACTION_BITS

@cython.locals(props=dict)
cpdef MessageExt half_of(MessageExt msg, object half_batch)

@cython.locals(props=dict, inner=dict, real=MessageExt)
cpdef list real_messages(MessageExt half, object half_offset, object commit_log_offset)
