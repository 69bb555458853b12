"""The tier-1 device library from a CuTe DSL kernel (``nvidia-cutlass-dsl`` 4.8.1), through the
same per-operation LLVM bitcode as the Triton binding (``aboleth/frontends/bitcode/``).

CuTe DSL declares an external device function with ``@cute.extern(source=cute.BitCode(path))``
on a typed stub; a call from a ``@cute.kernel`` adds ``path`` to the GPU module's link
libraries, and ``cute.compile`` links the bitcode into the kernel (no launch option, unlike
Triton's ``extern_libs``). ``library(transport)`` returns the operations' block forms (every
thread of the CTA calls with the same arguments), ``aboleth_tier1_<operation>_block``::

    from aboleth.frontends import cute as tier1_cute
    lib = tier1_cute.library("p2p")

    @cute.kernel
    def exchange(handles: Uint64, rank: Uint32, world_size: Uint32, peer: Int32, recv: Uint64,
                 dst_offset: Uint64, send: Uint64, send_key: Uint32, nbytes: Uint64, flags: Uint64,
                 flag_offset: Uint64, my_flag: Uint64, epoch: Uint64):
        lib.put_signal(handles, rank, world_size, peer, recv, dst_offset, send, send_key, nbytes,
                       flags, flag_offset, epoch)
        lib.quiet(handles, rank, world_size, peer)
        lib.wait_signal(handles, rank, world_size, my_flag, epoch)

Arguments are DSL integers, Python ints or ``cute.Pointer`` values (passed as their address):
the endpoint handle table, this rank and the world size, then each operation's as in
``aboleth.frontends.triton.tier1``. Importing this module needs CuTe DSL; nothing else of
aboleth does. Compiling for sm_90a works without a GPU (``python/tests/test_tier1_cute.py``);
running needs one: the seed's exchange through this binding ran bit-exact on the GPU machine
(``tests/gpu/tier1_exchange.py``, its ``cute`` step).
"""

# No `from __future__ import annotations`: cute.extern reads the stubs' annotations as types.

import os

import cutlass.cute as cute
from cutlass import Int32, Uint32, Uint64

from ..language import COMPARISONS
from . import BITCODE_DIRECTORY, TRANSPORTS, bitcode_paths

__all__ = ["Library", "library", "TRANSPORTS"]

#: `aboleth::SignalOp` values.
_SET, _ADD = 0, 1


def _address(value) -> Uint64:
    """A ``cute.Pointer``, DSL integer or Python int as the 64-bit address the library takes."""
    if isinstance(value, cute.Pointer):
        value = value.toint()
    return Uint64(value)


class Library:
    """The block forms of every tier-1 operation, linked from one transport's bitcode."""

    def __init__(self, transport: str, bitcode_directory: str = BITCODE_DIRECTORY) -> None:
        bitcode_paths(transport)  # ValueError for a transport without bitcode

        def source(operation: str):
            path = os.path.join(bitcode_directory, transport, f"{operation}.bc")
            if not os.path.isfile(path):
                raise FileNotFoundError(f"aboleth: no tier-1 bitcode at {path} (`aboleth device-library --bitcode` "
                                        "builds it)")
            return cute.BitCode(path)

        # The stubs' annotations are the entry points' C signatures; CuTe matches arguments by
        # exact type, so the methods below convert first.
        @cute.extern(source=source("put"))
        def aboleth_tier1_put_block(handles: Uint64, rank: Uint32, world_size: Uint32, peer: Int32, dst: Uint64,
                                    dst_offset: Uint64, src: Uint64, src_key: Uint32, nbytes: Uint64) -> Int32: ...

        @cute.extern(source=source("put_signal"))
        def aboleth_tier1_put_signal_block(handles: Uint64, rank: Uint32, world_size: Uint32, peer: Int32,
                                           dst: Uint64, dst_offset: Uint64, src: Uint64, src_key: Uint32,
                                           nbytes: Uint64, flags: Uint64, flag_offset: Uint64, value: Uint64,
                                           op: Uint32) -> Int32: ...

        @cute.extern(source=source("signal"))
        def aboleth_tier1_signal_block(handles: Uint64, rank: Uint32, world_size: Uint32, peer: Int32,
                                       flags: Uint64, flag_offset: Uint64, value: Uint64, op: Uint32) -> Int32: ...

        @cute.extern(source=source("fence"))
        def aboleth_tier1_fence_block(handles: Uint64, rank: Uint32, world_size: Uint32, peer: Int32) -> Int32: ...

        @cute.extern(source=source("quiet"))
        def aboleth_tier1_quiet_block(handles: Uint64, rank: Uint32, world_size: Uint32, peer: Int32) -> Int32: ...

        @cute.extern(source=source("wait_signal"))
        def aboleth_tier1_wait_signal_block(handles: Uint64, rank: Uint32, world_size: Uint32, my_flag: Uint64,
                                            value: Uint64, comparison: Uint32) -> Int32: ...

        self.transport = transport
        self._put = aboleth_tier1_put_block
        self._put_signal = aboleth_tier1_put_signal_block
        self._signal = aboleth_tier1_signal_block
        self._fence = aboleth_tier1_fence_block
        self._quiet = aboleth_tier1_quiet_block
        self._wait_signal = aboleth_tier1_wait_signal_block

    @staticmethod
    def _context(handles, rank, world_size):
        return _address(handles), Uint32(rank), Uint32(world_size)

    def put(self, handles, rank, world_size, peer, dst, dst_offset, src, src_key, nbytes):
        """Copies ``nbytes`` from ``src`` to region table ``dst`` at ``dst_offset`` on ``peer``."""
        return self._put(*self._context(handles, rank, world_size), Int32(peer), _address(dst), Uint64(dst_offset),
                         _address(src), Uint32(src_key), Uint64(nbytes))

    def put_signal(self, handles, rank, world_size, peer, dst, dst_offset, src, src_key, nbytes, flags, flag_offset,
                   value, add: bool = False):
        """``put``, then sets (``add``: adds ``value`` to) the 8-byte flag of region table
        ``flags`` at ``flag_offset`` on ``peer`` once the data is visible there."""
        return self._put_signal(*self._context(handles, rank, world_size), Int32(peer), _address(dst),
                                Uint64(dst_offset), _address(src), Uint32(src_key), Uint64(nbytes), _address(flags),
                                Uint64(flag_offset), Uint64(value), Uint32(_ADD if add else _SET))

    def signal(self, handles, rank, world_size, peer, flags, flag_offset, value, add: bool = False):
        """Updates the flag on ``peer`` after every earlier put and signal to ``peer``."""
        return self._signal(*self._context(handles, rank, world_size), Int32(peer), _address(flags),
                            Uint64(flag_offset), Uint64(value), Uint32(_ADD if add else _SET))

    def fence(self, handles, rank, world_size, peer):
        """Orders every earlier put and signal to ``peer`` before every later one."""
        return self._fence(*self._context(handles, rank, world_size), Int32(peer))

    def quiet(self, handles, rank, world_size, peer):
        """Returns once every earlier put and signal to ``peer`` is complete."""
        return self._quiet(*self._context(handles, rank, world_size), Int32(peer))

    def wait_signal(self, handles, rank, world_size, my_flag, value, comparison: str = "ge"):
        """Returns once ``*my_flag >= value``, or once it compares with ``value`` as
        ``comparison`` says (``"eq"``, ``"ne"``, ``"gt"``, ``"le"``, ``"lt"``; unsigned, as
        NVSHMEM's ``signal_wait_until``). Bounded: reported by ``World.check_waits()``."""
        if comparison not in COMPARISONS:
            raise ValueError(f"aboleth cute wait_signal: comparison {comparison!r} is not one of "
                             f"{', '.join(COMPARISONS)}")
        return self._wait_signal(*self._context(handles, rank, world_size), _address(my_flag), Uint64(value),
                                 Uint32(COMPARISONS.index(comparison)))


def library(transport: str, bitcode_directory: str = BITCODE_DIRECTORY) -> Library:
    """The tier-1 operations linked from ``transport``'s bitcode."""
    return Library(transport, bitcode_directory)
