# Augments command.py when it is compiled (setup.py): RemotingCommand as an extension type, its fields C struct
# members for the compiled modules that cimport it and type their commands. The fields stay Python objects (the
# same values as the interpreted class), and the command stays in the cyclic collector: ``ext_fields`` is a
# mutable dict anyone may fill.
cdef class RemotingCommand:
    cdef public object body, code, ext_fields, flag, language, opaque, remark, serialize_type, version
