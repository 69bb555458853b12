"""``python -m aboleth``: the command line for Python kernels (see :mod:`aboleth.cli`)."""

import sys

from .cli import main

sys.exit(main())
