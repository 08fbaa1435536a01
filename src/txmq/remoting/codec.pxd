# Augments codec.py when it is compiled (setup.py): the commands it decodes and encodes are RemotingCommand
# extension types (command.pxd), their fields read and written as C struct members (``cython.locals``).
from txmq.remoting.command cimport RemotingCommand
