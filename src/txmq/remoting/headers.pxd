# Augments headers.py when it is compiled (setup.py): its parsers as C functions, so the send header's written parser
# (request_headers.py) calls them without a Python call per field. The .py stays the one source of the logic.

cpdef object parse_int(object value, object name, object bits=*)
cpdef object parse_int32(object value, object name)
cpdef object parse_bool(object value, object name)

cdef dict _BOOLS
