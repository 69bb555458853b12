"""``aboleth.moe.Buffer``: DeepEP's ``Buffer`` API, low-latency mode, compiled by Aboleth.

A DeepEP user switches by changing the import: ``Buffer(group, num_nvl_bytes, num_rdma_bytes,
low_latency_mode=True, ...)``, ``Buffer.get_low_latency_rdma_size_hint(...)``,
``low_latency_dispatch(...)`` returning ``(recv_x, recv_count, handle, event, hook)``,
``low_latency_combine(...)`` returning ``(combined_x, event, hook)`` and
``get_next_low_latency_combine_buffer(handle)``; and the normal (throughput) mode's
``get_dispatch_layout``, ``dispatch`` and ``combine`` (``aboleth/moe/normal.py``, a mixin of
``Buffer``). What differs is listed in docs/COMPILED_MOE.md.

One pool per rank (``aboleth/moe/layout.py``) is registered with an :class:`aboleth.World` and
exchanged once as the region ``pool``. Every call runs on the current stream with no host
synchronization: the epochs live in the pool and are incremented on the device, so a CUDA graph
that captured a dispatch and a combine advances them on every replay. A wait that gave up, or a
call that raised before it had launched every kernel that moves its epoch and counters, stops
the Buffer: its calls raise at once until ``restart()`` on every rank (``_begin``). Failed waits
on the pool's counters are reported in MoE terms (peer, call, epoch, experts), others as the
World reports them.
"""

from __future__ import annotations

import os
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

from .compat import DeepEPExtras
from .launch import Launcher
from .layout import (ERROR_WORDS, FP8_GROUP_CHANNELS, WORST_ERROR_WORD, LowLatencyLayout, NormalLayout,
                     counters_span)
from .normal import NormalMode

#: Rows of hidden the copying kernels move per step, and tokens per receiving program.
BLOCK_HIDDEN = 1024
BLOCK_TOKENS = 16
#: Groups of 128 channels the FP8 pack quantizes at once.
FP8_BLOCK_GROUPS = 8
#: Programs of each receiving kernel (DeepEP's ``num_sms``; ``Buffer.set_num_sms``): every one
#: spins in bounded waits until the peers' data is there, so they must leave the rest of the GPU
#: to other work (and, when ranks share a GPU, to the peers' kernels).
DEFAULT_NUM_SMS = 24
#: Sending programs per peer on p2p (see ``Buffer.parts``): the low-latency mode's few rows
#: per expert, and the normal mode's tens of megabytes per peer.
P2P_PARTS = 16
P2P_NORMAL_PARTS = 128


def _torch() -> Any:
    import torch
    return torch


class EventOverlap:
    """DeepEP's event wrapper: ``current_stream_wait()``. Every Aboleth call runs on the current
    stream, so there is nothing to wait for; it exists so that DeepEP code runs unchanged."""

    def __init__(self, event: Any = None) -> None:
        self.event = event

    def current_stream_wait(self) -> None:
        if self.event is not None:
            _torch().cuda.current_stream().wait_event(self.event)


class LowLatencyHandle:
    """What a low-latency dispatch leaves for its combine: the routing, where each (token, k)
    was packed, and the received layout (``layout_range[j, s] = offset << 32 | count``)."""

    def __init__(self, layout: LowLatencyLayout, topk_idx: Any, positions: Any, layout_range: Any,
                 num_tokens: int) -> None:
        self.layout = layout
        self.topk_idx = topk_idx
        self.positions = positions
        self.layout_range = layout_range
        self.num_tokens = num_tokens


def normal_direct_choice(normal_direct: Optional[bool], target: str) -> bool:
    """Whether the normal mode's rows go direct (``Buffer(normal_direct=...)``): put by the
    p2p sending kernels straight from the caller's tensors into the peers' pools, with no staging
    copy (a p2p put is the program's own loads and stores, which may read any memory of the GPU),
    or staged in the pool first (``normal_pack``, ``normal_combine_pack``), which every transport
    can send (the queue transports put from registered memory only). ``None`` (the default) is
    direct on p2p and staged elsewhere: on p2p direct was as fast or faster at DeepEP's settings
    in the same runs (docs/COMPILED_MOE.md), and both pass every case of tests/gpu/moe_normal.py."""
    if normal_direct is None:
        return target == "p2p"
    if not isinstance(normal_direct, bool):
        raise ValueError(f"aboleth.moe.Buffer: normal_direct must be True, False or None, got {normal_direct!r}")
    if normal_direct and target != "p2p":
        raise ValueError(f"aboleth.moe.Buffer: normal_direct=True needs the p2p transport (its puts read the "
                         f"caller's tensors, which a {target} queue cannot send from); this World compiles for "
                         f"{target}: pass normal_direct=False or None")
    return normal_direct


class Buffer(NormalMode, DeepEPExtras):
    """Expert-parallel dispatch and combine over Aboleth (see the module docstring)."""

    #: The low-latency receiving kernels' programs: every Buffer's (``Buffer.set_num_sms(n)``)
    #: unless set on one (``buffer.set_num_sms(n)``).
    num_sms = DEFAULT_NUM_SMS

    def __init__(self, group: Any = None, num_nvl_bytes: int = 0, num_rdma_bytes: int = 0,
                 low_latency_mode: bool = False, num_qps_per_rank: int = 1,
                 allow_nvlink_for_low_latency_mode: bool = True, allow_mnnvl: bool = False,
                 explicitly_destroy: bool = False, *, world: Any = None, transport: str = "auto",
                 normal_direct: Optional[bool] = None) -> None:
        torch = _torch()
        import aboleth
        if world is None:
            if group is not None:
                rank, size = group.rank(), group.size()
            else:
                rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
            bootstrap = aboleth.TcpStoreBootstrap.from_env()
            world = aboleth.World(rank, size, device=torch.cuda.current_device(), bootstrap=bootstrap)
            world.connect_all(transport)
            self._owns_world = True
        else:
            self._owns_world = False
        self.world = world
        self.rank = world.rank
        self.group_size = world.world_size
        self.low_latency_mode = low_latency_mode
        pool_bytes = int(num_rdma_bytes) + int(num_nvl_bytes)
        if pool_bytes <= 0:
            raise ValueError("aboleth.moe.Buffer: num_rdma_bytes + num_nvl_bytes must be positive; size it with "
                             "Buffer.get_low_latency_rdma_size_hint(num_max_dispatch_tokens_per_rank, hidden, "
                             "num_ranks, num_experts)")
        self.pool = torch.zeros(pool_bytes, dtype=torch.uint8, device="cuda")
        registration = world.register(self.pool)
        self.table = world.exchange_regions({"pool": world.region("pool", registration)})
        self.pool_key = self.table.local("pool").lkey
        self._check_pool_sizes()
        self.endpoints = self.table.endpoint_handles.view(torch.int64)
        self.regions = self.table.regions("pool")
        self._layout: Any = None  # the last call's LowLatencyLayout or NormalLayout
        self._launchers: Dict[Any, Launcher] = {}  # per kernel (_launcher, _aboleth_launcher)
        self._normal_layouts: Dict[Tuple[int, ...], NormalLayout] = {}  # per configuration (normal.py)
        self._low_latency_layouts: Dict[Tuple[int, ...], LowLatencyLayout] = {}
        self._last_call: Optional[Tuple[str, str, Any]] = None  # (mode, "dispatch" or "combine", layout)
        # The call whose send is not launched yet ("normal dispatch", ...; _begin to _sent), and
        # why this Buffer stopped (None while it runs): see _begin and restart.
        self._sending: Optional[str] = None
        self._stopped: Optional[str] = None
        # Sending programs per peer: on p2p a program's threads copy the data, so more programs
        # move it faster (each adds 1 to the peer's counter); a queue transport's NIC or proxy
        # moves it, and one program per peer keeps one doorbell per peer and the queue its own.
        target = world.compilation_target()
        self.parts = P2P_PARTS if target == "p2p" else 1
        self.normal_parts = P2P_NORMAL_PARTS if target == "p2p" else 1
        self.normal_direct = normal_direct_choice(normal_direct, target)
        # See _wait_for_stream: poll where a host thread moves the data.
        self._poll_host_waits = target != "p2p" and os.environ.get("ABOLETH_MOE_BLOCKING_HOST_WAIT") != "1"

    def _check_pool_sizes(self) -> None:
        """Every rank's pool must be as large as this one's: the normal mode derives its blocks
        from the pool size, and a peer with a smaller pool would be written past its end."""
        from aboleth import _aboleth
        descriptor_bytes = len(_aboleth.layout_bytes("RemoteRegionDescriptor", {}))
        table = self.table.region_table_bytes("pool")
        for peer in range(self.group_size):
            fields = _aboleth.layout_fields("RemoteRegionDescriptor",
                                            table[peer * descriptor_bytes:(peer + 1) * descriptor_bytes])
            if fields["length_bytes"] != self.pool.numel():
                raise ValueError(f"aboleth.moe.Buffer: rank {peer}'s pool is {fields['length_bytes']} bytes, rank "
                                 f"{self.rank}'s {self.pool.numel()}: every rank must pass the same num_nvl_bytes "
                                 "+ num_rdma_bytes")

    # ---- sizing -------------------------------------------------------------------------------

    @staticmethod
    def get_low_latency_rdma_size_hint(num_max_dispatch_tokens_per_rank: int, hidden: int, num_ranks: int,
                                       num_experts: int) -> int:
        """Bytes of pool the low-latency mode needs for this configuration (BF16 rows)."""
        return LowLatencyLayout(num_ranks, num_experts, num_max_dispatch_tokens_per_rank, hidden).pool_bytes

    def _low_latency_layout(self, num_max_dispatch_tokens_per_rank: int, hidden: int,
                            num_experts: int, element_bytes: int = 2) -> LowLatencyLayout:
        # The configuration may change between calls (as in DeepEP, the pool must hold the
        # largest): the flags, counts, epochs and error words sit before every part whose place
        # depends on it, and the receivers check each signal's fingerprint.
        key = (num_max_dispatch_tokens_per_rank, hidden, num_experts, element_bytes)
        layout = self._low_latency_layouts.get(key)
        if layout is None:
            layout = LowLatencyLayout(self.group_size, num_experts, num_max_dispatch_tokens_per_rank, hidden,
                                      element_bytes)
            self._low_latency_layouts[key] = layout
        if layout.pool_bytes > self.pool.numel():
            raise ValueError(f"aboleth.moe.Buffer: the pool holds {self.pool.numel()} bytes but "
                             f"num_max_dispatch_tokens_per_rank={layout.max_tokens}, hidden={layout.hidden}, "
                             f"num_ranks={layout.ranks}, num_experts={layout.experts} need {layout.pool_bytes}; "
                             "pass num_rdma_bytes=Buffer.get_low_latency_rdma_size_hint(...)")
        return layout

    def _view(self, part: str, dtype: Any, shape: Tuple[int, ...], layout: Any = None) -> Any:
        """A part of the pool as ``dtype`` of ``shape``, at its place in ``layout`` (default:
        the last call's)."""
        offset, length = (layout or self._layout).parts()[part]
        return self.pool[offset:offset + length].view(dtype).view(shape)

    def _launcher(self, kernel: Any) -> Launcher:
        """This Buffer's launcher of the plain-Triton ``kernel`` (``aboleth/moe/launch.py``): its
        compiled kernels looked up without Triton's binding."""
        return self._launcher_of(kernel, communicates=False)

    def _aboleth_launcher(self, kernel: Any) -> Launcher:
        """The same for a kernel that communicates (``aboleth.language``): a launch that compiles
        (the first of each specialization) goes through this World's ``compilation()`` block, for
        its transport; the cached ones do not enter it (a block entered on every call cost a
        dispatch microseconds it spends on the host, which bounds it)."""
        return self._launcher_of(kernel, communicates=True)

    def _launcher_of(self, kernel: Any, communicates: bool) -> Launcher:
        """One launcher per kernel, made on first use; a kernel asked for as the other kind
        raises (it would compile without, or needlessly with, the aboleth stage)."""
        launcher = self._launchers.get(kernel)
        if launcher is None:
            compilation = self.world.compilation if communicates else None
            launcher = self._launchers[kernel] = Launcher(kernel, compilation=compilation)
        elif (launcher.compilation is not None) != communicates:
            right = "_aboleth_launcher" if launcher.compilation is not None else "_launcher"
            raise RuntimeError(f"aboleth.moe: launch {kernel.__name__} with {right}")
        return launcher

    def _begin(self, mode: str, call: str, layout: Any) -> None:
        """Refuses a call on a stopped Buffer, orders the call after the previous one
        (``_order_after``), and records that its send is not launched yet (until ``_sent``).

        Every rank's signal counters only grow, and each call waits for the peers' counters to
        reach its epoch: a rank that raised before it had launched every kernel that moves its
        epoch and counters (the send, and the normal combine's wait, which advances its epoch;
        a kernel that failed to compile, an interrupt), or whose wait gave up, leaves its
        counters and its peers' out of step for every later call, whose waits would all give
        up in turn. Such a Buffer stops instead: its calls raise at once, naming the first
        failure, until ``restart()`` (collective) starts the counters again. A wait that gave
        up is seen here once the World has its record (the device writes it to host memory
        when the wait ends; no synchronization here), or earlier by ``check_errors`` or a
        normal dispatch's host synchronization; only waits on this pool's counters stop this
        Buffer (the World's other users report their own). Replays of a captured graph do not
        pass here and are never refused."""
        if self._sending is not None:
            self._stop(f"its {self._sending} raised before it had launched every kernel that moves its epoch and "
                       "counters (the other ranks' waits for it give up, or its own later waits count the wrong "
                       "epoch)")
        if self._stopped is None:
            try:
                self.world.check_waits()  # a host read of the failure count when none failed
            except RuntimeError:
                described = self._describe_wait_failures()
                if described is not None:
                    self._stop(described)
        if self._stopped is not None:
            raise RuntimeError(f"aboleth.moe: this Buffer stopped on rank {self.rank}, after: {self._stopped} Its "
                               "signal counters are out of step with the other ranks': call restart() on this Buffer "
                               "on every rank (collective), or make a new Buffer")
        self._order_after(mode, call, layout)
        self._sending = f"{mode.replace('_', '-')} {call}"

    def _sent(self) -> None:
        """The call's send is launched: the peers will see its counter adds."""
        self._sending = None

    def _stop(self, reason: str) -> None:
        """Stops this Buffer (see ``_begin``), keeping the first reason (as a sentence: the
        refusal's next sentence follows it)."""
        if self._stopped is None:
            self._stopped = reason if reason.endswith((".", "?")) else reason + "."

    def _synchronize(self) -> None:
        """``torch.cuda.synchronize()``, after ``_wait_for_stream``."""
        self._wait_for_stream()
        _torch().cuda.synchronize()

    def _wait_for_stream(self) -> None:
        """Returns once the current stream ran what was queued on it, by polling an event on a
        transport whose data a host thread moves (the proxy, the software NIC). Why: a blocking
        wait (a synchronize, a copy to the host) queued behind a wait kernel holds this thread in
        the driver while the kernel spins for a peer, and if the driver makes this process's
        proxy thread wait for it (the proxy's copies go through the same context), the peer's
        kernel never gets this rank's data, and the peer may be blocked the same way: a cycle
        only the wait bound ends. That was the normal mode's 4096-token stall on the proxy
        (docs/COMPILED_MOE.md: gone with the polling, back without it, in one A/B on the GPU);
        ``ABOLETH_MOE_BLOCKING_HOST_WAIT=1`` turns the polling off, to compare. On p2p the GPU
        moves the data and the wait stays blocking."""
        if not self._poll_host_waits:
            return
        torch = _torch()
        done = torch.cuda.Event()
        done.record(torch.cuda.current_stream())
        started = time.monotonic()
        while not done.query():
            # Yield for the first 200 us (a dispatch's wait usually ends by then), then sleep
            # briefly, leaving the core to the proxy thread this waits for.
            time.sleep(0 if time.monotonic() - started < 200e-6 else 50e-6)

    def restart(self) -> None:
        """Starts a stopped Buffer again (see ``_begin``): every rank synchronizes its device (its
        bounded waits end), meets the others at a host barrier, zeroes the error words, epochs
        and counters, forgets the World's failed waits (all of them: restart every stopped Buffer
        of the World), and meets them again. Collective: every rank must call it, also a rank
        whose calls raised nothing. A rank that died cannot: then make a new World and new
        Buffers. Not in a CUDA graph capture."""
        torch = _torch()
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError("aboleth.moe.Buffer.restart: needs host barriers, which a CUDA graph cannot hold; "
                               "call it outside the capture")
        try:
            self.world.check_proxy()
        except RuntimeError as error:
            raise RuntimeError(f"aboleth.moe.Buffer.restart: the proxy stopped on rank {self.rank} ({error}) and "
                               "does not restart: make a new World and new Buffers") from None
        self._synchronize()
        # Barriers of their own name: a rank still in another collective (a call's ordering
        # barrier) gets the bootstrap's mismatch error naming both, not a wrong pairing.
        self.world.barrier("aboleth.moe/restart")
        _, end = counters_span(self.group_size)
        self.pool[:end].zero_()
        self._synchronize()
        self.world.clear_waits()
        self.world.barrier("aboleth.moe/restarted")
        self._stopped = self._sending = self._last_call = None

    def _order_after(self, mode: str, call: str, layout: Any) -> None:
        """Orders this call after the previous one. A dispatch then its combine (or a combine
        then the next dispatch) of one mode need nothing: each waits for what the peers' previous
        call had to finish reading. Two dispatches in a row (DeepEP's cached dispatch before the
        combine), two combines, or a change of mode would let a peer write pool parts this rank
        may still be reading, and so would a call whose layout (hidden size, top-k, dtype,
        experts, tokens per rank) differs from the previous call's, whose pool parts it moves:
        every rank synchronizes its device and meets at a host barrier first (not inside a CUDA
        graph capture: there such a sequence raises). A change of mode also restarts the epochs
        and counters (the modes send with different numbers of parts), between two barriers.
        Calls replayed from a CUDA graph do not pass here: replays must not be mixed with eager
        calls on the same Buffer without a device synchronize and a barrier between them."""
        previous, self._last_call = self._last_call, (mode, call, layout)
        if previous is None or (previous[0] == mode and previous[1] != call and previous[2] == layout):
            return
        torch = _torch()
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError(f"aboleth.moe: a {mode} {call} right after a {previous[0].replace('_', '-')} "
                               f"{previous[1]} (or with another layout) needs a host barrier, which a CUDA graph "
                               "cannot hold; capture dispatch and combine alternating, in one mode and configuration")
        self._synchronize()
        self.world.barrier()
        if previous[0] != mode:
            # The modes add another number of parts to the same counters: restart them (no
            # kernel runs anywhere between the barriers).
            first, end = counters_span(self.group_size)
            self.pool[first:end].zero_()
            self._synchronize()
            self.world.barrier()

    # ---- low-latency dispatch -----------------------------------------------------------------

    def low_latency_dispatch(self, x: Any, topk_idx: Any, num_max_dispatch_tokens_per_rank: int,
                             num_experts: int, cumulative_local_expert_recv_stats: Any = None,
                             dispatch_wait_recv_cost_stats: Any = None, use_fp8: bool = True,
                             round_scale: bool = False, use_ue8m0: bool = False, async_finish: bool = False,
                             return_recv_hook: bool = False) -> Tuple[Any, Any, LowLatencyHandle, EventOverlap, Any]:
        """Sends each token to each of its top-k experts. Returns ``(recv_x [local_experts,
        ranks * max_tokens, hidden], recv_count [local_experts] int32, handle, event, hook)``:
        expert ``j``'s rows ``[0, recv_count[j])`` are its tokens, sources in rank order, each
        source's in token order. ``recv_x`` is BF16, or with ``use_fp8`` (DeepEP's default) the
        pair ``(e4m3 rows, scales)``: x quantized on the send side with one scale per 128
        channels (``aboleth.moe.reference.low_latency_fp8_quantize``; ``round_scale``: powers of
        two), the scales float32 ``[local_experts, ranks * max_tokens, hidden / 128]``
        column-major as DeepEP's, or with ``use_ue8m0`` their exponent bytes packed four to an
        int32 ``[..., hidden / 512]``. ``cumulative_local_expert_recv_stats`` (int32
        ``[local_experts]``) gets each expert's received tokens added by the receive. With
        ``return_recv_hook=True`` only the send is launched and ``hook()`` launches the receive
        (compute may run in between)."""
        torch = _torch()
        from . import kernels
        if x.dim() != 2 or x.dtype != torch.bfloat16 or not x.is_cuda or not x.is_contiguous():
            raise ValueError(f"aboleth.moe.low_latency_dispatch: x must be a contiguous CUDA bfloat16 tensor "
                             f"[tokens, hidden], got {tuple(x.shape)} {x.dtype} on {x.device}")
        tokens, hidden = x.shape
        if use_ue8m0 and not (use_fp8 and round_scale):
            raise ValueError("aboleth.moe.low_latency_dispatch: use_ue8m0=True needs use_fp8=True and "
                             "round_scale=True (UE8M0 holds powers of two only)")
        if use_fp8 and hidden % (512 if use_ue8m0 else FP8_GROUP_CHANNELS):
            raise ValueError(f"aboleth.moe.low_latency_dispatch: FP8 needs hidden to be a multiple of "
                             f"{512 if use_ue8m0 else FP8_GROUP_CHANNELS} (one scale per {FP8_GROUP_CHANNELS} "
                             f"channels{', four to a UE8M0 word' if use_ue8m0 else ''}), got {hidden}")
        if topk_idx.dim() != 2 or topk_idx.shape[0] != tokens or topk_idx.dtype != torch.int64:
            raise ValueError(f"aboleth.moe.low_latency_dispatch: topk_idx must be int64 [{tokens}, k], got "
                             f"{tuple(topk_idx.shape)} {topk_idx.dtype}")
        if tokens > num_max_dispatch_tokens_per_rank:
            raise ValueError(f"aboleth.moe.low_latency_dispatch: {tokens} tokens exceed "
                             f"num_max_dispatch_tokens_per_rank={num_max_dispatch_tokens_per_rank}; nothing was sent")
        stats = cumulative_local_expert_recv_stats
        if stats is not None and (tuple(stats.shape) != (num_experts // self.group_size,)
                                  or stats.dtype != torch.int32 or not stats.is_cuda):
            raise ValueError(f"aboleth.moe.low_latency_dispatch: cumulative_local_expert_recv_stats must be a CUDA "
                             f"int32 tensor [{num_experts // self.group_size}] (one count per local expert), got "
                             f"{tuple(stats.shape)} {stats.dtype} on {stats.device}")
        layout = self._low_latency_layout(num_max_dispatch_tokens_per_rank, hidden, num_experts, 1 if use_fp8 else 2)
        self._begin("low_latency", "dispatch", layout)
        self._layout = layout
        topk_idx = topk_idx.contiguous()
        k = topk_idx.shape[1]
        ranks, local_experts, rank = layout.ranks, layout.local_experts, self.rank
        # Where each (token, k) lands in its expert's block: the tokens of an expert in token
        # order (an exclusive prefix count over the tokens; experts of one token are distinct).
        valid = topk_idx >= 0
        experts = topk_idx.clamp(min=0)
        membership = torch.zeros(tokens, num_experts, dtype=torch.int64, device=x.device)
        membership.scatter_add_(1, experts, valid.to(torch.int64))
        # The scan along the tokens as rows of the transpose (torch's scan of an outer
        # dimension is slow: see normal.py).
        by_expert = membership.t().contiguous()
        before = (by_expert.cumsum(1) - by_expert).t()
        positions = before.gather(1, experts).contiguous()
        counts = membership.sum(0)
        parts = layout.parts()
        self.pool[parts["epochs"][0]:parts["epochs"][0] + 8].view(torch.int64).add_(1)
        rows = torch.full((ranks, local_experts + 1), layout.fingerprint, dtype=torch.int64, device=x.device)
        rows[:, :local_experts] = counts.view(ranks, local_experts)
        self._view("send_counts", torch.int64, (ranks, local_experts + 1)).copy_(rows)
        self._view("dispatch_counts", torch.int64, (ranks, local_experts + 1))[rank].copy_(rows[rank])
        if tokens * k and use_fp8:
            groups = layout.scale_groups
            self._launcher(kernels.pack_tokens_fp8)[(tokens,)](
                x, topk_idx, positions, self.pool, K=k, RANK=rank, RANKS=ranks, LOCAL_EXPERTS=local_experts,
                MAX_TOKENS=layout.max_tokens, HIDDEN=hidden, ROW_BYTES=layout.dispatch_row_bytes,
                DISPATCH_TOKENS=parts["dispatch_tokens"][0], DISPATCH_SEND=parts["dispatch_send"][0],
                ROUND_SCALE=bool(round_scale), BLOCK_GROUPS=min(FP8_BLOCK_GROUPS, triton_next_power_of_2(groups)))
        elif tokens * k:
            self._launcher(kernels.pack_tokens)[(tokens * k,)](
                x, topk_idx, positions, self.pool, K=k, RANK=rank, RANKS=ranks, LOCAL_EXPERTS=local_experts,
                MAX_TOKENS=layout.max_tokens, HIDDEN=hidden, DISPATCH_TOKENS=parts["dispatch_tokens"][0],
                DISPATCH_SEND=parts["dispatch_send"][0], BLOCK_HIDDEN=min(BLOCK_HIDDEN, triton_next_power_of_2(hidden)))
        self._aboleth_launcher(kernels.dispatch_send)[((ranks - 1) * self.parts,)](
            self.endpoints, self.regions, self.pool, self.pool_key, RANK=rank, RANKS=ranks,
            LOCAL_EXPERTS=local_experts, MAX_TOKENS=layout.max_tokens, TOKEN_BYTES=layout.dispatch_row_bytes,
            PARTS=self.parts, DISPATCH_FLAGS=parts["dispatch_flags"][0],
            DISPATCH_COUNTS=parts["dispatch_counts"][0], SEND_COUNTS=parts["send_counts"][0],
            DISPATCH_TOKENS=parts["dispatch_tokens"][0], DISPATCH_SEND=parts["dispatch_send"][0])
        self._sent()
        slots = ranks * layout.max_tokens
        groups = layout.scale_groups
        x_words = hidden * layout.element_bytes // 4  # the rows move as int32 words
        recv_x = torch.empty(local_experts, slots, hidden, dtype=torch.float8_e4m3fn if use_fp8 else torch.bfloat16,
                             device=x.device)
        # DeepEP's scale layout: [local_experts, groups, slots] in memory, handed out transposed.
        scale_columns = groups // 4 if use_ue8m0 else groups
        recv_scales = torch.empty(local_experts, scale_columns, slots, dtype=torch.int32 if use_ue8m0 else torch.float32,
                                  device=x.device).transpose(1, 2) if use_fp8 else None
        recv_words = recv_x.view(torch.int32)
        scale_words = recv_scales.view(torch.int32) if use_fp8 else recv_words
        # Zeros: a wait that gives up ends dispatch_receive before it writes these, and the
        # combine then sends nothing (no puts from stale offsets and counts) and the stats get
        # nothing added.
        recv_count = torch.zeros(local_experts, dtype=torch.int32, device=x.device)
        layout_range = torch.zeros(local_experts, ranks, dtype=torch.int64, device=x.device)
        handle = LowLatencyHandle(layout, topk_idx, positions, layout_range, tokens)

        def receive() -> None:
            items = local_experts * ranks * triton_cdiv(layout.max_tokens, BLOCK_TOKENS)
            self._aboleth_launcher(kernels.dispatch_receive)[(min(items, self.num_sms),)](
                self.endpoints, self.pool, recv_words, scale_words, recv_count, layout_range, RANK=rank,
                RANKS=ranks, RANKS_POW2=triton_next_power_of_2(ranks), LOCAL_EXPERTS=local_experts,
                MAX_TOKENS=layout.max_tokens, X_WORDS=x_words, SCALE_GROUPS=groups,
                GROUPS_POW2=max(triton_next_power_of_2(groups), 4), UE8M0=bool(use_ue8m0),
                FINGERPRINT=layout.fingerprint, ERRORS=parts["errors"][0], EPOCHS=parts["epochs"][0],
                DISPATCH_FLAGS=parts["dispatch_flags"][0], DISPATCH_COUNTS=parts["dispatch_counts"][0],
                DISPATCH_TOKENS=parts["dispatch_tokens"][0], BLOCK_TOKENS=BLOCK_TOKENS,
                BLOCK_WORDS=min(BLOCK_HIDDEN // 2, triton_next_power_of_2(x_words)), PARTS=self.parts)
            if stats is not None:
                stats.add_(recv_count)  # on the stream, after the receive: graph-capturable

        received = (recv_x, recv_scales) if use_fp8 else recv_x
        if return_recv_hook:
            return received, recv_count, handle, EventOverlap(), receive
        receive()
        return received, recv_count, handle, EventOverlap(), None

    def get_next_low_latency_combine_buffer(self, handle: LowLatencyHandle) -> Any:
        """The pool's ``combine_send`` part as ``[local_experts, ranks * max_tokens, hidden]``:
        expert outputs written here are combined without a copy."""
        layout = handle.layout
        # The handle's layout, not the last call's: BF16 and FP8 layouts place combine_send apart.
        return self._view("combine_send", _torch().bfloat16,
                          (layout.local_experts, layout.ranks * layout.max_tokens, layout.hidden), layout)

    # ---- low-latency combine ------------------------------------------------------------------

    def low_latency_combine(self, x: Any, topk_idx: Any, topk_weights: Any, handle: LowLatencyHandle,
                            use_logfmt: bool = False, zero_copy: bool = False, async_finish: bool = False,
                            return_recv_hook: bool = False, out: Any = None,
                            combine_wait_recv_cost_stats: Any = None) -> Tuple[Any, EventOverlap, Any]:
        """Sends expert outputs ``x`` (dispatch's layout) back to their tokens' ranks, which sum
        ``weight * output`` over each token's top-k in k order (FP32, weights rounded to BF16).
        Returns ``(combined_x [tokens, hidden] BF16, event, hook)``."""
        torch = _torch()
        from . import kernels
        layout = handle.layout
        expected = (layout.local_experts, layout.ranks * layout.max_tokens, layout.hidden)
        if tuple(x.shape) != expected or x.dtype != torch.bfloat16:
            raise ValueError(f"aboleth.moe.low_latency_combine: x must be bfloat16 {list(expected)} (dispatch's "
                             f"recv_x layout), got {tuple(x.shape)} {x.dtype}")
        if tuple(topk_weights.shape) != tuple(handle.topk_idx.shape):
            raise ValueError(f"aboleth.moe.low_latency_combine: topk_weights must be {tuple(handle.topk_idx.shape)} "
                             f"like the dispatch's topk_idx, got {tuple(topk_weights.shape)}")
        if use_logfmt:
            raise NotImplementedError("aboleth.moe: LogFMT combine is not built; pass use_logfmt=False")
        self._begin("low_latency", "combine", layout)
        self._layout = layout
        combine_buffer = self.get_next_low_latency_combine_buffer(handle)
        if x.data_ptr() != combine_buffer.data_ptr():
            combine_buffer.copy_(x)
        parts = layout.parts()
        ranks, local_experts, rank = layout.ranks, layout.local_experts, self.rank
        self.pool[parts["epochs"][0] + 8:parts["epochs"][0] + 16].view(torch.int64).add_(1)
        self._aboleth_launcher(kernels.combine_send)[((ranks - 1) * self.parts,)](
            self.endpoints, self.regions, self.pool, self.pool_key, handle.layout_range, RANK=rank, RANKS=ranks,
            LOCAL_EXPERTS=local_experts, MAX_TOKENS=layout.max_tokens, TOKEN_BYTES=layout.combine_row_bytes,
            PARTS=self.parts, COMBINE_FLAGS=parts["combine_flags"][0],
            COMBINE_TOKENS=parts["combine_tokens"][0], COMBINE_SEND=parts["combine_send"][0])
        self._sent()
        tokens, k = handle.topk_idx.shape
        combined = out if out is not None else torch.empty(tokens, layout.hidden, dtype=torch.bfloat16,
                                                           device=x.device)
        weights = topk_weights.to(torch.float32).contiguous()
        block = min(BLOCK_HIDDEN, triton_next_power_of_2(layout.hidden))

        def receive() -> None:
            if tokens == 0:
                return
            items = tokens * triton_cdiv(layout.hidden, block)
            self._aboleth_launcher(kernels.combine_reduce)[(min(items, self.num_sms),)](
                self.endpoints, self.pool, handle.topk_idx, weights, handle.positions, handle.layout_range,
                combined, tokens, K=k, RANK=rank, RANKS=ranks, LOCAL_EXPERTS=local_experts, MAX_TOKENS=layout.max_tokens,
                HIDDEN=layout.hidden, FINGERPRINT=layout.fingerprint, ERRORS=parts["errors"][0],
                EPOCHS=parts["epochs"][0], COMBINE_FLAGS=parts["combine_flags"][0],
                COMBINE_TOKENS=parts["combine_tokens"][0], COMBINE_SEND=parts["combine_send"][0],
                BLOCK_HIDDEN=block, PARTS=self.parts)

        if return_recv_hook:
            return combined, EventOverlap(), receive
        receive()
        return combined, EventOverlap(), None

    # ---- failures -----------------------------------------------------------------------------

    def check_errors(self) -> None:
        """Raises ``RuntimeError`` for what the kernels recorded: a proxy ring that stopped (its
        reason), a wait that gave up (a peer that died or never sent: ``World.check_waits``'
        report, with the phase), a peer whose signal carried another configuration's
        fingerprint, or a normal dispatch that brought more rows than its ``num_worst_tokens``.
        The configuration and row-count errors are raised once; a stopped proxy or a wait that
        gave up also stops the Buffer (``_begin``), and is raised again until ``restart()``.
        Synchronizes the device."""
        torch = _torch()
        self._synchronize()
        if self._layout is None:
            self._raise_recorded(None)
            return
        self._raise_recorded(self._view("errors", torch.int64, (ERROR_WORDS,)).tolist())

    def _raise_recorded(self, errors: Optional[List[int]]) -> None:
        """``check_errors`` once the device is synchronized and its error words read (``errors``;
        None before any call): the host's records first, then the words."""
        try:
            self.world.check_proxy()  # a stopped proxy ring is why a wait then gives up
        except RuntimeError as error:
            self._stop(f"the proxy stopped ({error})")
            raise RuntimeError(f"aboleth.moe: the proxy stopped on rank {self.rank}: {error}") from None
        try:
            self.world.check_waits()
        except RuntimeError as error:
            described = self._describe_wait_failures()
            message = described or f"a MoE wait gave up on rank {self.rank}: {error}"
            self._stop(message)
            raise RuntimeError(f"aboleth.moe: {message}") from None
        if errors is None or not any(errors):
            return
        error_words = self._view("errors", _torch().int64, (ERROR_WORDS,))
        layout = self._layout
        if errors[0]:
            error_words[:WORST_ERROR_WORD].zero_()  # each failure is raised once
            source, sent, epoch = errors[0] - 1, errors[1], errors[2]
            if isinstance(layout, NormalLayout):
                settings = (f"the pool size (num_nvl_bytes + num_rdma_bytes), hidden, num_topk, num_experts and "
                            f"the dtype must be the same on every rank (this rank: {self.pool.numel()} bytes, "
                            f"{layout.hidden}, {layout.topk}, {layout.experts}, "
                            f"{'FP8' if layout.element_bytes == 1 else 'BF16'})")
            else:
                settings = (f"num_max_dispatch_tokens_per_rank, hidden and num_experts must be the same on every "
                            f"rank (this rank: {layout.max_tokens}, {layout.hidden}, {layout.experts})")
            raise RuntimeError(
                f"aboleth.moe: rank {source}'s dispatch of epoch {epoch} reached rank {self.rank} with another "
                f"configuration (fingerprint {sent:#x}, this rank's {layout.fingerprint:#x}): {settings}")
        received, bound, epoch = errors[WORST_ERROR_WORD:WORST_ERROR_WORD + 3]
        if received:
            error_words[WORST_ERROR_WORD:WORST_ERROR_WORD + 3].zero_()
            raise RuntimeError(f"aboleth.moe: the dispatch of epoch {epoch} brought rank {self.rank} {received} tokens "
                               f"but num_worst_tokens={bound}: the rows past {bound} were dropped; raise "
                               "num_worst_tokens (at most ranks * tokens per rank)")

    def failed_peers(self) -> List[int]:
        """The ranks whose sends one of this rank's waits on this Buffer gave up on (sorted,
        each once): the peers that died, hung or never called, as far as this rank can tell.
        A host read of the World's failure records (``World.wait_failures``), no device
        synchronization: a wait that is still running is not in it yet. Empty again after
        ``restart()``. vLLM's fault-tolerance mask is made of it
        (``AbolethAll2AllManager.query_active_mask``)."""
        return sorted({peer for _, peer, _ in self._failed_waits()})

    def _failed_waits(self) -> Iterator[Tuple[str, int, Dict[str, Any]]]:
        """(call, peer, record) for each of the World's failed waits on this Buffer's counters,
        oldest first; nothing before the first call (no layout) or for another pool's waits."""
        layout = self._layout
        if layout is None:
            return
        parts = layout.parts()
        base = self.pool.data_ptr()
        for record in self.world.wait_failures():
            offset = record["flag_address"] - base
            for call, part in (("dispatch", "dispatch_flags"), ("combine", "combine_flags")):
                first, length = parts[part]
                if first <= offset < first + length:
                    yield call, (offset - first) // 8, record

    def _describe_wait_failures(self) -> Optional[str]:
        """The World's failed waits on this Buffer's counters, each (phase, peer) once, in MoE
        terms (oldest first): the peer, the call and its epoch, the experts whose rows or outputs
        it carries, the last epoch that arrived whole; None when none of them is on this pool's
        counters (the World's own report is raised then)."""
        layout = self._layout
        normal = isinstance(layout, NormalLayout)
        per_call = self.normal_parts if normal else self.parts  # counter adds per peer and call
        local = layout.experts // self.group_size if layout is not None else 0

        def experts_of(rank: int) -> str:
            return f"experts {rank * local}..{(rank + 1) * local - 1}"

        described: Dict[Tuple[str, int], str] = {}
        for call, peer, record in self._failed_waits():
            epoch = record["expected_value"] // per_call
            carries = (f"the rows of its tokens routed to this rank's {experts_of(self.rank)}"
                       if call == "dispatch" else f"the outputs of its {experts_of(peer)} for this rank's tokens")
            described.setdefault((call, peer), (
                f"rank {self.rank} gave up after {record['waited_nanoseconds'] / 1e6:.0f} ms waiting for rank "
                f"{peer}'s {'normal' if normal else 'low-latency'} {call} of epoch {epoch} ({carries}): the "
                f"last that arrived whole was epoch {record['observed_value'] // per_call} (counter "
                f"{record['observed_value']}, {per_call} adds per call); is rank {peer} alive and calling "
                f"{call} with the same configuration?"))
        if not described:
            return None
        return "; ".join(described.values())  # oldest first

    def destroy(self) -> None:
        if self._owns_world:
            self.world.close()

def triton_next_power_of_2(value: int) -> int:
    return 1 << max(int(value) - 1, 0).bit_length()


def triton_cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b
