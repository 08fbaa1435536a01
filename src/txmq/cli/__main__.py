"""``python -m txmq.cli``: the ``txmq`` command."""

import sys

from txmq.cli import main

sys.exit(main())
