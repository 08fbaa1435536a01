# Augments codes.py when it is compiled (setup.py): the language lookups every decoded request makes as C functions,
# so the codec (codec.pxd) calls them without a Python call. The .py stays the one source of the logic.

cdef dict _LANGUAGE_BY_NAME, _LANGUAGE_BY_CODE
cdef object _OTHER

cpdef object language_from_name(object name)
cpdef object language_from_code(object code)
