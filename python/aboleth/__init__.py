"""aboleth: a compiler for GPU-initiated communication that plugs into an unmodified Triton 3.6.

- ``import aboleth.language as aboleth`` inside kernels: the builtins (``endpoint``, ``remote``,
  ``put``, ``signal``, ``wait_signal``, ``wait``, ``drain``/``quiet``, ``fence``), each one
  ``tt.extern_elementwise`` call into ``libname = "aboleth"`` (``aboleth/language.py``).
- ``aboleth.install(target=...)`` / ``with aboleth.compilation(target=...)``: the ``aboleth``
  stage after Triton's ``ttir`` stage, configured by an ``aboleth.Config`` (``aboleth/hook.py``).
- the host API of the seed (``aboleth/runtime.py``): ``aboleth.TcpStoreBootstrap.from_env()``,
  ``aboleth.World(rank, size, device=, bootstrap=)`` with ``connect_all``, ``register(tensor)``,
  ``region``, ``exchange_regions`` (a ``RegionTable`` whose device tables are torch tensors),
  ``compilation()``, ``device_library()``, ``barrier``, ``check_waits``, ``close``. torch is
  imported only where needed.
- ``aboleth.device_library``: the tier-1 CUDA device library (``aboleth/device.cuh``, the archive)
  for a transport, and the bytes of its kernel arguments.

- ``aboleth.packet_staging_bytes(length)``: the staging a flag region of packet signals needs.
- the ``aboleth`` command (``aboleth/cli.py``; also ``python -m aboleth``): the Rust command line,
  every verb, for ``.abo`` files and Triton kernels (``aboleth/triton_compile.py`` is what it runs
  for a ``.py`` kernel).

Everything runs in the Rust extension module ``aboleth._aboleth`` (crates/aboleth-python; its
stubs are ``_aboleth.pyi``, generated); these modules convert. mlx5 runs over the runtime's
software NIC only (``ABOLETH_RDMA_DEVICE=soft``): no machine here has an RDMA NIC.
"""

from ._aboleth import packet_staging_bytes
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
    is_dormant,
    is_installed,
    uninstall,
)
from . import device_library
from .runtime import (
    DeviceTable,
    LocalRegion,
    Region,
    RegionTable,
    Registration,
    TcpStoreBootstrap,
    World,
)

#: The version of the aboleth Rust side this package was built with.
__version__: str = _rust_version()

__all__ = [
    "packet_staging_bytes",
    "device_library",
    "BRIDGE_VERSION",
    "STAGE",
    "TARGETS",
    "Config",
    "cache_salt",
    "compilation",
    "current_config",
    "install",
    "is_dormant",
    "is_installed",
    "uninstall",
    "DeviceTable",
    "LocalRegion",
    "Region",
    "RegionTable",
    "Registration",
    "TcpStoreBootstrap",
    "World",
    "__version__",
]
