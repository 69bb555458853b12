"""The ``aboleth`` command: the package's console script and ``python -m aboleth``.

It is the Rust command line (``aboleth-cli``: ``opt``, ``compile``, ``sim``, ``plan``,
``passes``, for ``.abo`` files and Triton kernels in ``.py`` files), run inside this process
through the extension module, with this interpreter compiling Triton kernels
(:mod:`aboleth.triton_compile`). So ``pip install .`` gives the same command, every verb
included, as ``cargo run -p aboleth-cli``. Nothing is decided here.
"""

from __future__ import annotations

import signal
import sys
from typing import Optional, Sequence

from . import _aboleth


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs ``aboleth ARGUMENTS`` (default: this process's) and returns the exit status."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    # The Rust command runs with the GIL released and does not return to Python until it ends,
    # so Python's Ctrl-C handler would only set a flag: let SIGINT end the process, as it ends
    # the cargo-built binary. (This is the whole process's command, not a library call.)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    # Rust writes to the process's file descriptors: flush what Python buffered first.
    sys.stdout.flush()
    sys.stderr.flush()
    return _aboleth.run_command_line(["aboleth", *arguments], sys.executable)
