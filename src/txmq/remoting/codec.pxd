# Augments codec.py when it is compiled (setup.py): the commands it decodes and encodes are RemotingCommand
# extension types (command.pxd), their fields read and written as C struct members (``cython.locals``). The frame
# decoder is an extension type (its buffer and position C members), and what every decoded request passes
# (``_new_command``, ``_json_int``, ``_is_int32``, the language lookups of codes.pxd) are C functions, as is the
# check an answer's ids need no JSON escape (``_plain``).
from txmq.remoting.command cimport RemotingCommand
from txmq.remoting.codes cimport language_from_code, language_from_name

cdef class FrameDecoder:
    cdef bytearray _buf
    cdef Py_ssize_t _pos
    cdef object _error
    cdef public object max_frame_size
    cpdef object next_command(self)  # a C call from the transport's loop over a read's frames

cdef RemotingCommand _new_command(object code, object language, object version, object opaque, object flag,
                                  object remark, object ext, object serialize_type)
cdef bint _is_int32(object value)
cdef object _json_int(dict obj, object name, object default)

cdef class EncodedResponse:  # one per send's answer (its freelist is on the class in codec.py)
    cdef public object code
    cdef public bytes frame

cdef bint _plain(str text)
