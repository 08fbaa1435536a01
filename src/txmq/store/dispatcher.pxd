# Augments dispatcher.py when it is compiled (setup.py): what every stored record asks (consumable? indexed? its
# keys) as C functions to the store's group commit (message_store.pxd); they stay importable.
cpdef bint builds_consume_queue(object sys_flag)
cpdef bint builds_index(object sys_flag)
cpdef list keys_of(object keys, object uniq_key)
