"""The rest of DeepEP v1's ``Buffer`` surface, so that DeepEP code runs after changing the import:
``Config`` with ``Buffer.get_dispatch_config`` / ``get_combine_config``, ``Buffer.set_num_sms``
in DeepEP's static form, ``Buffer.capture``, ``Buffer.is_sm90_compiled``, ``get_comm_stream``,
``get_local_buffer_tensor`` and ``clean_low_latency_buffer``, as a mixin the ``Buffer`` class
inherits (with ``aboleth/moe/normal.py``'s).

What each does here, where it differs from DeepEP's (docs/COMPILED_MOE.md lists them too): a
``Config`` is accepted as ``config=`` and not read (the sending kernels' programs come from the
transport, not from chunk sizes), and its buffer-size hints raise, naming
``Buffer.get_normal_size_hint``: DeepEP's NVLink buffer is a queue of chunks whatever the number
of tokens, the Aboleth pool holds every token of a call. There is no communication stream (every
call runs on the current stream). ``clean_low_latency_buffer`` checks that the pool holds the
configuration and cleans nothing: a switch between the modes restarts the epochs and counters
itself (``Buffer._order_after``). This module launches no kernel.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

#: DeepEP's default ``num_sms`` for its normal-mode kernels, what ``Config`` says when not told.
DEEPEP_DEFAULT_NUM_SMS = 20


class Config:
    """DeepEP's ``Config(num_sms, nvl_send, nvl_recv, rdma_send, rdma_recv)``: the chunk sizes of
    DeepEP's normal-mode queues, kept as given. Aboleth's dispatch and combine take it as
    ``config=`` and do not read it."""

    def __init__(self, num_sms: int = DEEPEP_DEFAULT_NUM_SMS, num_max_nvl_chunked_send_tokens: int = 6,
                 num_max_nvl_chunked_recv_tokens: int = 256, num_max_rdma_chunked_send_tokens: int = 6,
                 num_max_rdma_chunked_recv_tokens: int = 256) -> None:
        self.num_sms = num_sms
        self.num_max_nvl_chunked_send_tokens = num_max_nvl_chunked_send_tokens
        self.num_max_nvl_chunked_recv_tokens = num_max_nvl_chunked_recv_tokens
        self.num_max_rdma_chunked_send_tokens = num_max_rdma_chunked_send_tokens
        self.num_max_rdma_chunked_recv_tokens = num_max_rdma_chunked_recv_tokens

    def __repr__(self) -> str:
        return (f"Config(num_sms={self.num_sms}, nvl_send={self.num_max_nvl_chunked_send_tokens}, "
                f"nvl_recv={self.num_max_nvl_chunked_recv_tokens}, rdma_send={self.num_max_rdma_chunked_send_tokens}, "
                f"rdma_recv={self.num_max_rdma_chunked_recv_tokens}; not read by aboleth.moe)")

    def get_nvl_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        raise ValueError(
            "aboleth.moe.Config.get_nvl_buffer_size_hint: the aboleth.moe pool holds every token of a call, not "
            "DeepEP's chunked queue, so its size depends on the tokens per rank, top-k and experts: pass "
            "num_nvl_bytes=Buffer.get_normal_size_hint(num_max_tokens_per_rank, hidden, num_ranks, num_topk, "
            f"num_experts, use_fp8) (hidden_bytes={hidden_bytes}, num_ranks={num_ranks} are not enough)")

    def get_rdma_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        raise ValueError(
            "aboleth.moe.Config.get_rdma_buffer_size_hint: aboleth.moe's normal mode is one pool "
            "(num_nvl_bytes + num_rdma_bytes): size it with Buffer.get_normal_size_hint(num_max_tokens_per_rank, "
            f"hidden, num_ranks, num_topk, num_experts, use_fp8) (hidden_bytes={hidden_bytes}, "
            f"num_ranks={num_ranks} are not enough)")


class class_or_instance_method:
    """A method bound to the instance when called on one and to the class when called on it:
    ``Buffer.set_num_sms(n)`` (DeepEP's static form: every Buffer without its own setting) and
    ``buffer.set_num_sms(n)`` (that Buffer)."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        functools.update_wrapper(self, function)

    def __get__(self, instance: Any, owner: type) -> Callable[..., Any]:
        return functools.partial(self.function, owner if instance is None else instance)


def _torch() -> Any:
    import torch
    return torch


class DeepEPExtras:
    """The DeepEP ``Buffer`` methods that move no data (see the module docstring). ``Buffer``
    provides ``pool``, ``num_sms`` (a class default, and per instance once set) and
    ``_low_latency_layout``."""

    num_sms: int
    pool: Any
    _low_latency_layout: Callable[..., Any]

    @class_or_instance_method
    def set_num_sms(target: Any, num_sms: int) -> None:  # noqa: N805 (the class or the instance)
        """How many programs (one CTA each) the low-latency receiving kernels use (default 24):
        on the class, every Buffer's that has no setting of its own (DeepEP's static form); on a
        Buffer, that one's. DeepEP's ``num_sms`` sizes its normal-mode kernels; Aboleth's
        normal-mode copies are grids over the rows, and only its waits spin (one program each)."""
        if not isinstance(num_sms, int) or isinstance(num_sms, bool) or num_sms <= 0:
            raise ValueError(f"aboleth.moe.Buffer.set_num_sms: a positive integer, got {num_sms!r}")
        target.num_sms = num_sms

    @classmethod
    def get_dispatch_config(cls, num_ranks: int) -> Config:
        """A ``Config`` for ``dispatch(config=...)``, accepted and not read (any ``num_ranks``)."""
        return cls._config("get_dispatch_config", num_ranks)

    @classmethod
    def get_combine_config(cls, num_ranks: int) -> Config:
        """A ``Config`` for ``combine(config=...)``, accepted and not read (any ``num_ranks``)."""
        return cls._config("get_combine_config", num_ranks)

    @classmethod
    def _config(cls, name: str, num_ranks: int) -> Config:
        if not isinstance(num_ranks, int) or isinstance(num_ranks, bool) or num_ranks < 1:
            raise ValueError(f"aboleth.moe.Buffer.{name}: num_ranks must be a positive integer, got {num_ranks!r}")
        return Config(cls.num_sms)

    @staticmethod
    def capture() -> Any:
        """An ``EventOverlap`` holding an event recorded on the current stream (DeepEP's
        ``previous_event=Buffer.capture()``); ``current_stream_wait()`` waits for it."""
        from .buffer import EventOverlap
        torch = _torch()
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream())
        return EventOverlap(event)

    @staticmethod
    def is_sm90_compiled() -> bool:
        """Whether the current GPU has SM90's features (TMA, clusters): Aboleth's kernels are
        compiled by Triton for the GPU they run on, so it is the GPU's compute capability
        (DeepEP: whether its extension was built with them)."""
        torch = _torch()
        return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0)

    def get_comm_stream(self) -> Any:
        """The current stream: every aboleth.moe call runs on it (DeepEP has a stream of its own
        for ``async_finish``)."""
        return _torch().cuda.current_stream()

    def get_local_buffer_tensor(self, dtype: Any, size: Any = None, offset: int = 0,
                                use_rdma_buffer: bool = False) -> Any:
        """This rank's pool as ``dtype`` from element ``offset``, ``size`` (a shape) elements of
        it or all that is left. One pool holds both of DeepEP's buffers, so ``use_rdma_buffer``
        gives the same one. What the kernels keep there is ``aboleth/moe/layout.py``'s."""
        element_bytes = _torch().empty((), dtype=dtype).element_size()
        elements = self.pool.numel() // element_bytes
        if not isinstance(offset, int) or not 0 <= offset <= elements:
            raise ValueError(f"aboleth.moe.Buffer.get_local_buffer_tensor: offset must be an element index in "
                             f"[0, {elements}] for {dtype} in a {self.pool.numel()}-byte pool, got {offset!r}")
        tensor = self.pool[:elements * element_bytes].view(dtype)[offset:]
        if size is None:
            return tensor
        wanted = math.prod(int(extent) for extent in size)
        if wanted > tensor.numel():
            raise ValueError(f"aboleth.moe.Buffer.get_local_buffer_tensor: {tuple(size)} needs {wanted} elements of "
                             f"{dtype}, the pool has {tensor.numel()} from element {offset}")
        return tensor[:wanted].view(tuple(size))

    def clean_low_latency_buffer(self, num_max_dispatch_tokens_per_rank: int, hidden: int,
                                 num_experts: int) -> None:
        """Checks that the pool holds this low-latency configuration (the error names the size
        hint) and cleans nothing: the first call of a mode after the other restarts the epochs
        and counters on every rank between host barriers, which is what DeepEP's clean is for."""
        self._low_latency_layout(num_max_dispatch_tokens_per_rank, hidden, num_experts)
