"""Aboleth's tier-1 bindings for other kernel languages (``docs/TIERS.md``): ``triton.tier1`` (a
stock Triton 3.6 kernel) and ``cute`` (a CuTe DSL kernel) call the device library's operations
through their LLVM bitcode, packaged here per transport (``bitcode/<transport>/<operation>.bc``,
which ``make bless`` regenerates with ``aboleth device-library --bitcode``). This module only
says where it is; importing it needs neither Triton nor CuTe DSL."""

import os
from typing import Dict

#: The per-operation bitcode of each transport.
BITCODE_DIRECTORY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bitcode")
#: The operations, in the order of aboleth/device.cuh.
OPERATIONS = ("put", "put_signal", "signal", "fence", "quiet", "wait_signal")
#: The transports whose bitcode this package carries.
TRANSPORTS = ("p2p", "proxy", "mlx5")


def bitcode_paths(transport: str) -> Dict[str, str]:
    """Each operation's bitcode file for ``transport``. ``ValueError`` for a transport without it."""
    if transport not in TRANSPORTS:
        raise ValueError(f"aboleth: the tier-1 bitcode exists for {', '.join(TRANSPORTS)}, not {transport!r} "
                         "(efa and ionic have no code generation yet)")
    return {operation: os.path.join(BITCODE_DIRECTORY, transport, f"{operation}.bc") for operation in OPERATIONS}
