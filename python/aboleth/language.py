"""The aboleth builtins for ``@triton.jit`` kernels: ``import aboleth.language as aboleth``.

Every builtin emits exactly one ``tt.extern_elementwise`` with ``libname = "aboleth"``,
``libpath = ""``, ``pure = false``, scalar operands only, and a symbol that encodes the op and
its static parameters (``docs/TRITON_BRIDGE.md``, "Builtins become extern calls"):

- ``endpoint(endpoints, peer)`` -> ``__aboleth_v1__endpoint`` -> :class:`Endpoint`
- ``remote(regions, peer, dtype=tl.int8)`` -> ``__aboleth_v1__remote__e{E}`` -> :class:`RemoteRegion`
- ``region.at(index)`` -> ``__aboleth_v1__at__e{E}`` -> :class:`RemotePointer`
- ``put(ep, dst, src, nbytes, source_key=k)`` -> ``__aboleth_v1__put`` -> :class:`Token`
- ``put(..., predicate=p)`` -> ``__aboleth_v1__put_if`` -> :class:`Token`
- ``signal(ep, flag, value, op="set")`` -> ``__aboleth_v1__signal__set`` (or ``__add``) -> :class:`Token`
- ``signal(..., after=t)`` -> ``__aboleth_v1__signal_after__set`` (or ``__add``) -> :class:`Token`
- ``wait_signal(ptr, value)`` -> ``__aboleth_v1__wait_signal`` -> i32
- ``wait(token)`` -> ``__aboleth_v1__wait`` -> i32
- ``drain(ep)`` / ``quiet(ep)`` -> ``__aboleth_v1__drain`` -> i32
- ``fence(ep)`` -> ``__aboleth_v1__fence`` -> i32

``E`` is the element size in bytes of the region's ``dtype``. Operands are passed in the order of
the contract table; integer operands keep the width they have (i32 or i64), so the Rust side sees
exactly what the kernel computed.

How handles are represented. Endpoints, remote regions, remote pointers and tokens are each one
``i64`` SSA value in TTIR, but in the frontend they are values of their own classes
(:class:`Endpoint`, :class:`RemoteRegion`, :class:`RemotePointer`, :class:`Token`), subclasses of
Triton's ``triton.language.core.base_value`` with a matching ``base_type``. That is the mechanism
Triton 3.6 itself uses for tuples and tensor descriptors: the code generator keeps any
``base_value`` as it is on assignment, carries it through ``scf.for``/``scf.if``/``scf.while``
and into ``@triton.jit`` helpers by flattening it to IR handles and rebuilding it from its type
(``_flatten_ir`` / ``_unflatten_ir``), and binds its plain Python methods (``region.at``) with the
``_semantic`` argument. So a token stays a token across a loop, and ``after=`` can check its class.
A constexpr-wrapped Python object would not work (it cannot hold an SSA value), and
``tl.core._aggregate`` would work but adds per-field attribute checks and a private decorator for
no gain over a one-handle value. A plain ``tl.tensor`` would lose the distinction at the first
loop or branch, which rebuilds tensors from their dtype.

Consequences: handles are opaque (no arithmetic: ``dst.at(RANK * BYTES)``, not ``dst + ...``);
a handle reassigned in a loop must be of the same class before the loop (Triton requires a
loop-carried value to keep its Python type), so a token carried out of a loop starts from an
earlier ``put`` or ``signal``.

Checks made at trace time, each raising an error that names the builtin, the argument and the
rule (Triton wraps it in a ``CompilationError`` pointing at the kernel line; the original
exception is its ``__cause__``):

- a block (tensor with a shape) where a scalar is required: ``TypeError``;
- integer operands must be 32- or 64-bit integers (``peer``, ``index``, ``nbytes``,
  ``source_key``, ``value``); ``predicate`` must be a boolean or a 32-bit integer: ``TypeError``;
- pointers: ``endpoints`` and ``regions`` must point to 64-bit integers (the tables are read as
  64-bit words), ``src`` may point to any element type, the ``wait_signal`` flag must point to a
  64-bit integer; a block pointer or a non-pointer is rejected: ``TypeError``;
- ``ep`` must be an :class:`Endpoint`, ``dst`` and ``flag`` :class:`RemotePointer` values (and
  ``flag`` one into a region of 8-byte elements, a signal word), ``after`` and ``wait``'s argument
  a :class:`Token` returned by ``put`` or ``signal``: ``TypeError``;
- ``op`` must be ``"set"`` or ``"add"``: ``ValueError``; ``dtype`` must be a whole-byte
  element type: ``TypeError``; ``source_key`` is required: ``TypeError``.

What this module does not do: any lowering (the Rust side replaces the calls in the
``aboleth`` stage), the interpreter mode
(``TRITON_INTERPRET=1``), or checks that need values (bounds, peer ranges).
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import triton.language as tl
from triton._C.libtriton import ir
from triton.language import core

__all__ = [
    "ABOLETH_LIBNAME",
    "COMPARISONS",
    "SYMBOL_PREFIX",
    "Endpoint",
    "RemoteRegion",
    "RemotePointer",
    "Token",
    "endpoint",
    "remote",
    "put",
    "signal",
    "wait_signal",
    "wait",
    "drain",
    "quiet",
    "fence",
]

#: The ``libname`` of every aboleth extern call.
ABOLETH_LIBNAME = "aboleth"
#: The prefix of every symbol of version 1 of the builtin contract.
SYMBOL_PREFIX = "__aboleth_v1__"

_SIGNAL_OPS = ("set", "add")
#: What :func:`wait_signal` may compare with, in NVSHMEM's ``NVSHMEM_CMP_*`` order (EQ 0 ... GE 5):
#: the names of the Rust ``aboleth_ir::ab::attributes::Comparison`` and of tier 1's
#: ``aboleth::Comparison``.
COMPARISONS = ("eq", "ne", "gt", "le", "lt", "ge")

# ---------------------------------------------------------------------------------------------
# Handle values
# ---------------------------------------------------------------------------------------------


class _HandleType(core.base_type):
    """The frontend type of an aboleth handle: one ``i64`` in IR, a class in the frontend.

    ``element_bytes`` is the element size of a region or remote pointer (part of the type, since
    it selects the symbol of ``at``); ``None`` for endpoints and tokens.
    """

    def __init__(self, kind: str, element_bytes: Optional[int] = None) -> None:
        self.kind = kind
        self.element_bytes = element_bytes

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, _HandleType) and self.kind == other.kind
                and self.element_bytes == other.element_bytes)

    def __hash__(self) -> int:
        return hash((self.kind, self.element_bytes))

    def __repr__(self) -> str:
        suffix = "" if self.element_bytes is None else f"[e{self.element_bytes}]"
        return f"aboleth.{self.kind}{suffix}"

    def mangle(self) -> str:
        """The name used in mangled names of ``@triton.jit`` helpers taking this value."""
        suffix = "" if self.element_bytes is None else f"e{self.element_bytes}"
        return f"aboleth{self.kind}{suffix}"

    def _flatten_ir_types(self, builder: ir.builder, out: List[ir.type]) -> None:
        out.append(builder.get_int64_ty())

    def _unflatten_ir(self, handles: List[ir.value], cursor: int) -> Tuple[core.base_value, int]:
        return _HANDLE_CLASSES[self.kind](handles[cursor], self.element_bytes), cursor + 1


class _Handle(core.base_value):
    """An aboleth handle in a kernel: one ``i64`` SSA value with a frontend class.

    Handles are opaque: arithmetic on them is an error.
    """

    kind = "handle"
    description = "an aboleth handle"

    def __init__(self, handle: ir.value, element_bytes: Optional[int] = None) -> None:
        self.handle = handle
        self.type = _HandleType(self.kind, element_bytes)

    def _flatten_ir(self, handles: List[ir.value]) -> None:
        handles.append(self.handle)

    def __repr__(self) -> str:
        return f"<{self.type!r}>"

    def _no_arithmetic(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(f"{self.description} is opaque: it supports no arithmetic"
                        + (" (use region.at(index) to address into a remote region)" if isinstance(
                            self, (RemoteRegion, RemotePointer)) else ""))

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _no_arithmetic


class Endpoint(_Handle):
    """The handle returned by :func:`endpoint`: the connection to one peer."""

    kind = "endpoint"
    description = "an aboleth endpoint"


class RemotePointer(_Handle):
    """An address in a peer's memory, returned by :meth:`RemoteRegion.at`."""

    kind = "remote_pointer"

    @property
    def element_bytes(self) -> int:
        """The element size of the region this pointer was taken from."""
        return self.type.element_bytes

    @property
    def description(self) -> str:  # type: ignore[override]
        return f"an aboleth remote pointer ({self.element_bytes}-byte elements)"


class RemoteRegion(_Handle):
    """A peer's region, returned by :func:`remote`; ``region.at(index)`` addresses into it."""

    kind = "remote_region"

    @property
    def element_bytes(self) -> int:
        """The element size given by ``remote(..., dtype)``."""
        return self.type.element_bytes

    @property
    def description(self) -> str:  # type: ignore[override]
        return f"an aboleth remote region ({self.element_bytes}-byte elements)"

    def at(self, index: Any, _semantic: Any = None) -> RemotePointer:
        """The remote address of element ``index`` (i32 or i64 scalar) of this region.

        Emits ``__aboleth_v1__at__e{E}`` (region, index) -> i64. Does not check bounds.
        """
        index_value = _integer_scalar("region.at", "index", index, _semantic)
        value = _emit(f"at__e{self.element_bytes}", [self.handle, index_value.handle], _semantic)
        return RemotePointer(value, self.element_bytes)


class Token(_Handle):
    """The completion token of a :func:`put` or :func:`signal`."""

    kind = "token"
    description = "an aboleth token"


_HANDLE_CLASSES = {cls.kind: cls for cls in (Endpoint, RemoteRegion, RemotePointer, Token)}

# ---------------------------------------------------------------------------------------------
# Argument checks
# ---------------------------------------------------------------------------------------------


def _describe(value: Any) -> str:
    """A short description of a frontend value for error messages."""
    value = core._unwrap_if_constexpr(value)
    if isinstance(value, _Handle):
        return value.description
    if isinstance(value, core.tensor):
        if value.type.is_block():
            return f"a block of shape {_shape(value)} of {value.dtype}"
        return f"a scalar of type {value.dtype}"
    if isinstance(value, core.dtype):
        return f"the type {value}"
    if value is None:
        return "None"
    if isinstance(value, str):
        return f"the string {value!r}"
    return f"{type(value).__name__} {value!r}"


def _shape(value: core.tensor) -> List[int]:
    return [int(core._unwrap_if_constexpr(dimension)) for dimension in value.shape]


def _scalar_tensor(operation: str, name: str, value: Any, _semantic: Any, what: str) -> core.tensor:
    """``value`` as a scalar tensor (Python numbers and constexprs become constants).

    Raises ``TypeError`` for a block, a handle, ``None`` or a non-numeric Python value.
    """
    value = core._unwrap_if_constexpr(value)
    if isinstance(value, (bool, int, float)):
        return _semantic.to_tensor(value)
    if isinstance(value, core.tensor):
        if value.type.is_block():
            raise TypeError(f"{operation}: argument '{name}' must be a scalar, "
                            f"got a block of shape {_shape(value)}")
        return value
    raise TypeError(f"{operation}: argument '{name}' must be {what}, got {_describe(value)}")


def _integer_scalar(operation: str, name: str, value: Any, _semantic: Any) -> core.tensor:
    """Checks that ``value`` is a 32- or 64-bit integer scalar and returns it as a tensor."""
    what = "a 32- or 64-bit integer scalar"
    tensor = _scalar_tensor(operation, name, value, _semantic, what)
    dtype = tensor.dtype
    if not (dtype.is_int() and dtype.int_bitwidth in (32, 64)):
        raise TypeError(f"{operation}: argument '{name}' must be {what}, got {_describe(tensor)}")
    return tensor


def _predicate_scalar(operation: str, name: str, value: Any, _semantic: Any) -> core.tensor:
    """Checks that ``value`` is a boolean (i1) or 32-bit integer scalar."""
    what = "a boolean or 32-bit integer scalar"
    tensor = _scalar_tensor(operation, name, value, _semantic, what)
    dtype = tensor.dtype
    if not (dtype.is_bool() or (dtype.is_int() and dtype.int_bitwidth == 32)):
        raise TypeError(f"{operation}: argument '{name}' must be {what}, got {_describe(tensor)}")
    return tensor


def _pointer_scalar(operation: str, name: str, value: Any, element_bits: Optional[int], what: str) -> core.tensor:
    """Checks that ``value`` is a scalar pointer (to an integer of ``element_bits`` bits, when
    given) and returns it. ``what`` describes the expected pointer in messages."""
    value = core._unwrap_if_constexpr(value)
    if isinstance(value, core.tensor) and value.type.is_block():
        raise TypeError(f"{operation}: argument '{name}' must be a scalar, "
                        f"got a block of shape {_shape(value)}")
    if not (isinstance(value, core.tensor) and value.dtype.is_ptr()):
        raise TypeError(f"{operation}: argument '{name}' must be {what}, got {_describe(value)}")
    element = value.dtype.element_ty
    if element.is_block() or element.is_ptr():
        raise TypeError(f"{operation}: argument '{name}' must be {what}, got {value.dtype}")
    if element_bits is not None and not (element.is_int() and element.int_bitwidth == element_bits):
        raise TypeError(f"{operation}: argument '{name}' must be {what}, got {value.dtype}")
    return value


def _handle(operation: str, name: str, value: Any, cls: type, what: str) -> _Handle:
    """Checks that ``value`` is an aboleth handle of class ``cls``."""
    value = core._unwrap_if_constexpr(value)
    if not isinstance(value, cls):
        raise TypeError(f"{operation}: argument '{name}' must be {what}, got {_describe(value)}")
    return value


def _constexpr_string(operation: str, name: str, value: Any, choices: Sequence[str]) -> str:
    value = core._unwrap_if_constexpr(value)
    quoted = ", ".join(f'"{choice}"' for choice in choices[:-1]) + f' or "{choices[-1]}"'
    if not isinstance(value, str):
        raise TypeError(f"{operation}: argument '{name}' must be a constant string, "
                        f"{quoted}, got {_describe(value)}")
    if value not in choices:
        raise ValueError(f"{operation}: argument '{name}' must be {quoted}, got \"{value}\"")
    return value


def _emit(operation: str, operands: List[ir.value], _semantic: Any, result: core.dtype = tl.int64) -> ir.value:
    """Emits the one ``tt.extern_elementwise`` of a builtin and returns its result handle.

    Calls the builder directly: ``core.extern_elementwise`` dispatches on a dict keyed by
    operand dtypes, and Triton 3.6's ``pointer_type`` is unhashable.
    """
    builder = _semantic.builder
    return builder.create_extern_elementwise(ABOLETH_LIBNAME, "", SYMBOL_PREFIX + operation, operands,
                                             result.to_ir(builder), False)


_ENDPOINT = "an endpoint returned by aboleth.endpoint"
_REMOTE_POINTER = "a remote pointer returned by region.at(index)"
_TOKEN = "a token returned by aboleth.put or aboleth.signal"

# ---------------------------------------------------------------------------------------------
# Builtins
# ---------------------------------------------------------------------------------------------


@core.extern
def endpoint(endpoints: Any, peer: Any, _semantic: Any = None) -> Endpoint:
    """The endpoint to ``peer``: ``endpoints`` is the endpoint table (a pointer to int64 words),
    ``peer`` an i32 or i64 scalar. Emits ``__aboleth_v1__endpoint``. Does not check the rank."""
    table = _pointer_scalar("aboleth.endpoint", "endpoints", endpoints, 64, "a pointer to int64 (the endpoint table)")
    peer_value = _integer_scalar("aboleth.endpoint", "peer", peer, _semantic)
    return Endpoint(_emit("endpoint", [table.handle, peer_value.handle], _semantic))


@core.extern
def remote(regions: Any, peer: Any, dtype: Any = tl.int8, _semantic: Any = None) -> RemoteRegion:
    """``peer``'s copy of a region: ``regions`` is the region table (a pointer to int64 words),
    ``peer`` an i32 or i64 scalar, ``dtype`` the element type that ``region.at(index)`` counts in
    (default ``tl.int8``: byte offsets). Emits ``__aboleth_v1__remote__e{E}``."""
    element = core._unwrap_if_constexpr(dtype)
    if (not isinstance(element, core.dtype) or element.is_ptr() or element.is_block()
            or element.primitive_bitwidth % 8 != 0):
        raise TypeError("aboleth.remote: argument 'dtype' must be an element type of whole bytes "
                        f"such as tl.int8 or tl.int64, got {_describe(element)}")
    element_bytes = element.primitive_bitwidth // 8
    table = _pointer_scalar("aboleth.remote", "regions", regions, 64, "a pointer to int64 (the region table)")
    peer_value = _integer_scalar("aboleth.remote", "peer", peer, _semantic)
    return RemoteRegion(_emit(f"remote__e{element_bytes}", [table.handle, peer_value.handle], _semantic),
                        element_bytes)


@core.extern
def put(ep: Any, dst: Any, src: Any, nbytes: Any, source_key: Any = None, predicate: Any = None,
        _semantic: Any = None) -> Token:
    """Copies ``nbytes`` bytes from local ``src`` to the remote ``dst`` over ``ep``; returns a
    token for :func:`wait` (the source buffer may be reused after it) and ``signal(after=)``.

    ``source_key`` (required) is the source buffer's memory key (i32 or i64; 0 where the transport
    needs none). With ``predicate`` (i1 or i32), the put happens only where it is true. Emits
    ``__aboleth_v1__put`` or ``__aboleth_v1__put_if``.
    """
    endpoint_value = _handle("aboleth.put", "ep", ep, Endpoint, _ENDPOINT)
    destination = _handle("aboleth.put", "dst", dst, RemotePointer, _REMOTE_POINTER)
    source = _pointer_scalar("aboleth.put", "src", src, None, "a pointer to local memory")
    size = _integer_scalar("aboleth.put", "nbytes", nbytes, _semantic)
    if core._unwrap_if_constexpr(source_key) is None:
        raise TypeError("aboleth.put: argument 'source_key' is required: the memory key of the source "
                        "buffer (an i32 or i64 scalar; 0 where the transport needs none)")
    key = _integer_scalar("aboleth.put", "source_key", source_key, _semantic)
    operands = [endpoint_value.handle, destination.handle, source.handle, size.handle, key.handle]
    if core._unwrap_if_constexpr(predicate) is None:
        return Token(_emit("put", operands, _semantic))
    condition = _predicate_scalar("aboleth.put", "predicate", predicate, _semantic)
    return Token(_emit("put_if", operands + [condition.handle], _semantic))


@core.extern
def signal(ep: Any, flag: Any, value: Any, op: Any = "set", after: Any = None, _semantic: Any = None) -> Token:
    """Sets (``op="set"``) or adds to (``op="add"``) the remote 64-bit signal word ``flag`` over
    ``ep``, after the token ``after`` if given; returns a token. ``value`` is an i32 or i64
    scalar. Emits ``__aboleth_v1__signal__{op}`` or ``__aboleth_v1__signal_after__{op}``."""
    endpoint_value = _handle("aboleth.signal", "ep", ep, Endpoint, _ENDPOINT)
    flag_value = _handle("aboleth.signal", "flag", flag, RemotePointer, _REMOTE_POINTER)
    if flag_value.element_bytes != 8:
        raise TypeError("aboleth.signal: argument 'flag' must be a remote pointer to a 64-bit signal word "
                        "(take it from aboleth.remote(..., tl.int64)), got "
                        f"{flag_value.description}")
    signal_value = _integer_scalar("aboleth.signal", "value", value, _semantic)
    operation = _constexpr_string("aboleth.signal", "op", op, _SIGNAL_OPS)
    operands = [endpoint_value.handle, flag_value.handle, signal_value.handle]
    if core._unwrap_if_constexpr(after) is None:
        return Token(_emit(f"signal__{operation}", operands, _semantic))
    token = _handle("aboleth.signal", "after", after, Token, _TOKEN)
    return Token(_emit(f"signal_after__{operation}", operands + [token.handle], _semantic))


@core.extern
def wait_signal(ptr: Any, value: Any, comparison: Any = "ge", _semantic: Any = None) -> core.tensor:
    """Waits until the local 64-bit signal word at ``ptr`` compares with ``value`` (i32 or
    i64) as ``comparison`` says: ``"ge"`` (the default: the flag reaches ``value``), ``"eq"``,
    ``"ne"``, ``"gt"``, ``"le"`` or ``"lt"`` (NVSHMEM's ``signal_wait_until`` comparisons, on
    signed 64-bit values). Emits ``__aboleth_v1__wait_signal`` (``>=``) or
    ``__aboleth_v1__wait_signal__{comparison}``; returns an i32."""
    flag = _pointer_scalar("aboleth.wait_signal", "ptr", ptr, 64, "a pointer to int64 (a local signal word)")
    expected = _integer_scalar("aboleth.wait_signal", "value", value, _semantic)
    name = _constexpr_string("aboleth.wait_signal", "comparison", comparison, COMPARISONS)
    symbol = "wait_signal" if name == "ge" else f"wait_signal__{name}"
    return core.tensor(_emit(symbol, [flag.handle, expected.handle], _semantic, tl.int32), tl.int32)


@core.extern
def wait(token: Any, _semantic: Any = None) -> core.tensor:
    """Waits for the put or signal that returned ``token`` to complete locally (its source
    buffer is free). Emits ``__aboleth_v1__wait``; returns an i32."""
    value = _handle("aboleth.wait", "token", token, Token, _TOKEN)
    return core.tensor(_emit("wait", [value.handle], _semantic, tl.int32), tl.int32)


def _endpoint_op(operation: str, symbol: str, ep: Any, _semantic: Any) -> core.tensor:
    value = _handle(f"aboleth.{operation}", "ep", ep, Endpoint, _ENDPOINT)
    return core.tensor(_emit(symbol, [value.handle], _semantic, tl.int32), tl.int32)


@core.extern
def drain(ep: Any, _semantic: Any = None) -> core.tensor:
    """Waits until every put and signal issued on ``ep`` has completed locally. Emits
    ``__aboleth_v1__drain``; returns an i32."""
    return _endpoint_op("drain", "drain", ep, _semantic)


@core.extern
def quiet(ep: Any, _semantic: Any = None) -> core.tensor:
    """The NVSHMEM name of :func:`drain` (same symbol, ``__aboleth_v1__drain``)."""
    return _endpoint_op("quiet", "drain", ep, _semantic)


@core.extern
def fence(ep: Any, _semantic: Any = None) -> core.tensor:
    """Orders the puts and signals issued on ``ep`` before it ahead of those after it. Emits
    ``__aboleth_v1__fence``; returns an i32."""
    return _endpoint_op("fence", "fence", ep, _semantic)
