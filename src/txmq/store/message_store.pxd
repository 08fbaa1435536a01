# Augments message_store.py when it is compiled (setup.py): the messages of a put are MessageExt extension types
# (message.pxd), so its loops (``cython.locals``) read and write their fields as C struct members, and encode each
# with record.py's ``encode_record`` called as a C function.
from txmq.message cimport MessageExt
from txmq.store.record cimport encode_record
