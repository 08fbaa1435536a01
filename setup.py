"""Builds txmq's compiled modules; pyproject.toml holds everything else (metadata, dependencies, packages).

Each module below is an ordinary ``.py`` file of the package compiled by Cython in its pure Python mode: the same
file runs interpreted when it is not built, so the logic has one source. ``make`` rebuilds them when one changes
(the Makefile's install stamp depends on them) and ``tests/test_compiled.py`` fails when a module was not compiled
or its build is older than its source.
"""

import os

from Cython.Build import cythonize
from setuptools import setup

# The build runs in every fresh `make test` / `make run`: Cython and the C compiler use every core.
JOBS = os.cpu_count() or 1

COMPILED_MODULES = [
    "src/txmq/remoting/codec.py",
    "src/txmq/remoting/headers.py",
    "src/txmq/remoting/request_headers.py",
    "src/txmq/remoting/command.py",
    "src/txmq/remoting/codes.py",
    "src/txmq/topic.py",
    "src/txmq/message.py",
    "src/txmq/store/record.py",
    "src/txmq/store/mapped_file.py",  # every group's append and consume-queue run write through its segments
    "src/txmq/store/commit_log.py",
    "src/txmq/store/consume_queue.py",
    "src/txmq/store/dispatcher.py",
    "src/txmq/store/index.py",
    "src/txmq/store/group_commit.py",
    "src/txmq/store/message_store.py",
    "src/txmq/store/replica.py",  # a slave appends every record its master streams through it
    "src/txmq/store/results.py",
    "src/txmq/futures.py",
    "src/txmq/remoting/transport.py",
    "src/txmq/remoting/registry.py",  # every request passes its dispatcher
    "src/txmq/broker/core/send.py",  # every send's checks and put, whichever protocol sends
    "src/txmq/broker/processor/send.py",
    "src/txmq/broker/transaction/half.py",  # every transaction builds its half and its real message there
    "src/txmq/acl/signer.py",
    "src/txmq/acl/model.py",
    "src/txmq/acl/store.py",
    "src/txmq/acl/validator.py",
    "src/txmq/acl/config.py",
    "src/txmq/broker/stats.py",
    "src/txmq/message_columns.py",  # its C types come from annotations: it turns annotation_typing on itself
]

setup(
    options={"build_ext": {"parallel": JOBS}},
    ext_modules=cythonize(
        COMPILED_MODULES,
        nthreads=JOBS,
        compiler_directives={
            "language_level": "3",
            # Type hints stay hints: a compiled ``def f(b: bytes)`` would otherwise refuse the bytearray the
            # interpreted one takes. C types come from ``cython`` declarations only.
            "annotation_typing": False,
            # A variable typed as an extension type may hold None: reading its fields then raises AttributeError, as
            # interpreted, instead of reading through a null pointer (a compare per access, not measurable per send).
            "nonecheck": True,
        },
    )
)
