# Augments dispatcher.py when it is compiled (setup.py): what every stored record asks (consumable? indexed? its
# keys) and its index entries, as C functions to the store's group commit (group_commit.pxd); they stay importable.
from txmq.store.index cimport IndexService

cpdef bint builds_consume_queue(object sys_flag)
cpdef bint builds_index(object sys_flag)
cpdef list keys_of(object keys, object uniq_key)
cpdef build_index(IndexService index, bint enabled, object topic, object sys_flag, object keys, object uniq_key,
                  object offset, object store_timestamp)
