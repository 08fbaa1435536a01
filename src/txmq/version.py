"""txmq's version, as installed (``txmq --version``, brokerVersionDesc)."""

from importlib.metadata import PackageNotFoundError, version

try:
    VERSION = version("txmq")
except PackageNotFoundError:  # run from a source tree that was never installed
    VERSION = "0+unknown"
