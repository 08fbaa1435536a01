# Augments record.py when it is compiled (setup.py): encoding a record calls message.py's ``message_parts`` as a C
# function, and the store (message_store.py) calls ``encode_record`` as one.
from txmq.message cimport MessageExt, message_parts

cpdef bytearray encode_record(MessageExt m)
