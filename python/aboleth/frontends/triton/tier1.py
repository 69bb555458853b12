"""The tier-1 device library from a stock Triton 3.6 kernel, through its LLVM bitcode.

Each operation of ``aboleth/device.cuh`` is a Triton function here, the block form (a Triton
program is a block: every thread runs the call with the same arguments), calling the
operation's bitcode entry point ``aboleth_tier1_<operation>_block`` with ``extern_elementwise``.
The bitcode is the device library's, built by clang from the same generated C++
(``aboleth device-library --bitcode``) and shipped in this package per transport
(``aboleth/frontends/bitcode/<transport>/<operation>.bc``); ``python/tests/test_tier1_triton.py`` checks that it
is what the current compiler generates. Triton links what the launch's ``extern_libs`` names,
so a launch passes ``extern_libs=tier1.extern_libs(transport)`` (``world.compilation_target()``
gives the transport), and no ``world.compilation()`` block is needed::

    from aboleth.frontends.triton import tier1

    @triton.jit
    def exchange(handles, rank, world_size, peer, recv, dst_offset, send, send_key, nbytes,
                 flags, flag_offset, my_flag, epoch):
        tier1.put_signal(handles, rank, world_size, peer, recv, dst_offset, send, send_key,
                         nbytes, flags, flag_offset, epoch)
        tier1.quiet(handles, rank, world_size, peer)
        tier1.wait_signal(handles, rank, world_size, my_flag, epoch)

    exchange[(1,)](table.endpoint_handles, world.rank, world.world_size, peer,
                   table.regions("recv"), rank * BYTES, send.address + peer * BYTES, send.lkey,
                   BYTES, table.regions("flags"), rank * 8, my_flags[peer:], epoch,
                   extern_libs=tier1.extern_libs(world.compilation_target()))

Arguments: the endpoint handle table, this rank and the world size (what ``DeviceContext``
holds); tables and addresses as pointers or 64-bit integers; offsets in bytes. What each call
does, its bounded waits and its limits are the library's (``docs/TIERS.md``); the calls are
library-style, so nothing is planned across them (tier 2 does that).
"""

from __future__ import annotations

import os
from typing import Dict

import triton
import triton.language as tl
from triton.language import core

from ...language import COMPARISONS
from .. import BITCODE_DIRECTORY, OPERATIONS, TRANSPORTS, bitcode_paths

__all__ = ["extern_libs", "OPERATIONS", "TRANSPORTS", "put", "put_signal", "put_signal_add", "signal", "signal_add", "fence",
           "quiet", "wait_signal"]

#: `aboleth::SignalOp` values.
_SET, _ADD = 0, 1


def extern_libs(transport: str) -> Dict[str, str]:
    """The ``extern_libs`` launch option that links ``transport``'s bitcode (every operation's).
    ``ValueError`` for a transport without it."""
    return {f"aboleth_tier1_{operation}": path for operation, path in bitcode_paths(transport).items()}


def _entry(operation: str, argument_types: tuple):
    """The extern call of ``aboleth_tier1_<operation>_block`` with ``argument_types``."""
    symbol = f"aboleth_tier1_{operation}_block"
    path = os.path.join(BITCODE_DIRECTORY, "p2p", f"{operation}.bc")  # linked from extern_libs

    @core.extern
    def call(*arguments, _semantic=None):
        return core.extern_elementwise(f"aboleth_tier1_{operation}", path, list(arguments),
                                       {argument_types: (symbol, core.int32)}, is_pure=False,
                                       _semantic=_semantic)

    call.__name__ = f"_{operation}_block"
    return call


_U64, _U32, _I32 = core.uint64, core.uint32, core.int32
_CONTEXT = (_U64, _U32, _U32)
_put = _entry("put", _CONTEXT + (_I32, _U64, _U64, _U64, _U32, _U64))
_put_signal = _entry("put_signal", _CONTEXT + (_I32, _U64, _U64, _U64, _U32, _U64, _U64, _U64, _U64, _U32))
_signal = _entry("signal", _CONTEXT + (_I32, _U64, _U64, _U64, _U32))
_fence = _entry("fence", _CONTEXT + (_I32,))
_quiet = _entry("quiet", _CONTEXT + (_I32,))
_wait_signal = _entry("wait_signal", _CONTEXT + (_U64, _U64, _U32))


@core.extern
def _comparison_code(comparison, _semantic=None):
    """``aboleth::Comparison``'s value (NVSHMEM's ``NVSHMEM_CMP_*``) of a comparison name, as a
    uint32 constant; ``ValueError`` naming the choices otherwise."""
    name = core._unwrap_if_constexpr(comparison)
    if name not in COMPARISONS:
        raise ValueError(f"aboleth tier1.wait_signal: comparison {name!r} is not one of {', '.join(COMPARISONS)}")
    return core.full((), COMPARISONS.index(name), core.uint32, _semantic=_semantic)


@triton.jit
def _address(value):
    """A table, pointer or integer as the 64-bit address the library takes."""
    return tl.cast(tl.cast(value, tl.int64), tl.uint64, bitcast=True)


@triton.jit
def put(handles, rank, world_size, peer, dst, dst_offset, src, src_key, nbytes):
    """Copies ``nbytes`` from ``src`` to region table ``dst`` at ``dst_offset`` on ``peer``;
    ``src`` may be reused after ``quiet``."""
    _put(_address(handles), tl.cast(rank, tl.uint32), tl.cast(world_size, tl.uint32), tl.cast(peer, tl.int32), _address(dst),
         tl.cast(dst_offset, tl.uint64), _address(src), tl.cast(src_key, tl.uint32), tl.cast(nbytes, tl.uint64))


@triton.jit
def put_signal(handles, rank, world_size, peer, dst, dst_offset, src, src_key, nbytes, flags, flag_offset, value):
    """``put``, then sets the 8-byte flag of region table ``flags`` at ``flag_offset`` on
    ``peer`` to ``value`` once the data is visible there."""
    _put_signal(_address(handles), tl.cast(rank, tl.uint32), tl.cast(world_size, tl.uint32), tl.cast(peer, tl.int32), _address(dst),
                tl.cast(dst_offset, tl.uint64), _address(src), tl.cast(src_key, tl.uint32), tl.cast(nbytes, tl.uint64),
                _address(flags), tl.cast(flag_offset, tl.uint64), tl.cast(value, tl.uint64), tl.full((), 0, tl.uint32))


@triton.jit
def put_signal_add(handles, rank, world_size, peer, dst, dst_offset, src, src_key, nbytes, flags, flag_offset, value):
    """``put_signal`` that adds ``value`` to the flag."""
    _put_signal(_address(handles), tl.cast(rank, tl.uint32), tl.cast(world_size, tl.uint32), tl.cast(peer, tl.int32), _address(dst),
                tl.cast(dst_offset, tl.uint64), _address(src), tl.cast(src_key, tl.uint32), tl.cast(nbytes, tl.uint64),
                _address(flags), tl.cast(flag_offset, tl.uint64), tl.cast(value, tl.uint64), tl.full((), 1, tl.uint32))


@triton.jit
def signal(handles, rank, world_size, peer, flags, flag_offset, value):
    """Sets the flag on ``peer`` to ``value`` after every earlier put and signal to ``peer``."""
    _signal(_address(handles), tl.cast(rank, tl.uint32), tl.cast(world_size, tl.uint32), tl.cast(peer, tl.int32), _address(flags),
            tl.cast(flag_offset, tl.uint64), tl.cast(value, tl.uint64), tl.full((), 0, tl.uint32))


@triton.jit
def signal_add(handles, rank, world_size, peer, flags, flag_offset, value):
    """``signal`` that adds ``value`` to the flag."""
    _signal(_address(handles), tl.cast(rank, tl.uint32), tl.cast(world_size, tl.uint32), tl.cast(peer, tl.int32), _address(flags),
            tl.cast(flag_offset, tl.uint64), tl.cast(value, tl.uint64), tl.full((), 1, tl.uint32))


@triton.jit
def fence(handles, rank, world_size, peer):
    """Orders every earlier put and signal to ``peer`` before every later one."""
    _fence(_address(handles), tl.cast(rank, tl.uint32), tl.cast(world_size, tl.uint32), tl.cast(peer, tl.int32))


@triton.jit
def quiet(handles, rank, world_size, peer):
    """Returns once every earlier put and signal to ``peer`` is complete."""
    _quiet(_address(handles), tl.cast(rank, tl.uint32), tl.cast(world_size, tl.uint32), tl.cast(peer, tl.int32))


@triton.jit
def wait_signal(handles, rank, world_size, my_flag, value, comparison: tl.constexpr = tl.constexpr("ge")):
    """Returns once ``*my_flag >= value``, or once it compares with ``value`` as
    ``comparison`` says (``"eq"``, ``"ne"``, ``"gt"``, ``"le"``, ``"lt"``; unsigned, as
    NVSHMEM's ``signal_wait_until``). Bounded: reported by ``World.check_waits()``."""
    _wait_signal(_address(handles), tl.cast(rank, tl.uint32), tl.cast(world_size, tl.uint32), _address(my_flag),
                 tl.cast(value, tl.uint64), _comparison_code(comparison))
