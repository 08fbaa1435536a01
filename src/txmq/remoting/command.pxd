# Augments command.py when it is compiled (setup.py): RemotingCommand as an extension type, its fields C struct
# members for the compiled modules that cimport it and type their commands. The fields stay Python objects (the
# same values as the interpreted class), and the command stays in the cyclic collector: ``ext_fields`` is a
# mutable dict anyone may fill. Freed ones are reused (``cython.freelist`` in command.py: directives go on the
# class there).
cdef class RemotingCommand:
    # in the dataclass's field order (command.py): Cython's dataclass takes its fields' order from here
    cdef public object code, language, version, opaque, flag, remark, ext_fields, body, serialize_type
