"""aboleth: a compiler for GPU-initiated communication that plugs into an unmodified Triton 3.6.

- ``import aboleth.language as aboleth`` inside kernels: the builtins (``endpoint``, ``remote``,
  ``put``, ``signal``, ``wait_signal``, ``wait``, ``drain``/``quiet``, ``fence``), each one
  ``tt.extern_elementwise`` call into ``libname = "aboleth"`` (``aboleth/language.py``).
- ``aboleth.install(target=...)`` / ``with aboleth.compilation(target=...)``: the ``aboleth``
  stage after Triton's ``ttir`` stage (``aboleth/hook.py``).

What is not here yet: lowering the calls (the stage raises ``NotImplementedError`` for kernels
that have them; issue 3), and the host runtime (``World``, bootstrap, region tables).
"""

from ._aboleth import version as _rust_version
from .hook import (
    BRIDGE_VERSION,
    STAGE,
    TARGETS,
    Config,
    cache_salt,
    compilation,
    current_config,
    install,
    is_installed,
    uninstall,
)

#: The version of the aboleth Rust side this package was built with.
__version__: str = _rust_version()

__all__ = [
    "BRIDGE_VERSION",
    "STAGE",
    "TARGETS",
    "Config",
    "cache_salt",
    "compilation",
    "current_config",
    "install",
    "is_installed",
    "uninstall",
    "__version__",
]
