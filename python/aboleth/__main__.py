"""``python -m aboleth``: the ``aboleth`` command (see :mod:`aboleth.cli`)."""

import sys

from .cli import main

sys.exit(main())
