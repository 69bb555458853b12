"""The normal (throughput) mode of :class:`aboleth.moe.Buffer`: DeepEP's ``get_dispatch_layout``,
``dispatch`` (BF16 or FP8 with scales, cached with a handle, ``num_worst_tokens`` for CUDA
graphs) and ``combine``, as a mixin the ``Buffer`` class inherits.

Each call is the kernels of ``aboleth/moe/normal_kernels.py`` (the first computes each token's
place among a destination's tokens and the counts rows) and a few torch allocations.
``num_tokens_per_rank`` is required as in DeepEP but not read: the counts come from
``is_token_in_rank``, which defines them. A dispatch synchronizes the
host once to size its outputs (as DeepEP's does), except with ``num_worst_tokens``: then the
outputs have that many rows and nothing waits on the host, so a dispatch and a combine can be
captured in a CUDA graph. What the pool holds is ``NormalLayout`` in ``aboleth/moe/layout.py``.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from .layout import ERROR_WORDS, WORST_ERROR_WORD, NormalLayout

#: int32 words the copying kernels move per step; hidden elements per reducing program; tokens
#: per step of the prepare kernel's scan.
BLOCK_WORDS = 1024
BLOCK_HIDDEN = 1024
BLOCK_TOKENS = 1024


class NormalHandle:
    """What a normal dispatch leaves for its combine and for a cached dispatch: the routing
    (``is_token_in_rank`` as bytes, each token's place among each rank's tokens and, per rank,
    its tokens in place order), the
    per-expert token counts it sent, the received layout on the device (``recv_info``: each source's first row, the total,
    the aligned per-expert counts) and the number of received rows."""

    def __init__(self, layout: NormalLayout, is_token_in_rank: Any, positions: Any, send_tokens: Any,
                 num_tokens_per_expert: Any, recv_info: Any, num_rows: int, num_worst_tokens: int, num_tokens: int,
                 num_recv_tokens_per_expert_list: List[int]) -> None:
        self.layout = layout
        self.is_token_in_rank = is_token_in_rank
        self.positions = positions
        self.send_tokens = send_tokens
        self.num_tokens_per_expert = num_tokens_per_expert
        self.recv_info = recv_info
        self.num_rows = num_rows
        self.num_worst_tokens = num_worst_tokens
        self.num_tokens = num_tokens
        self.num_recv_tokens_per_expert_list = num_recv_tokens_per_expert_list


def dispatch_layout(topk_idx: Any, num_experts: int, num_ranks: int) -> Tuple[Any, Any, Any]:
    """``(num_tokens_per_rank [ranks] int32, num_tokens_per_expert [experts] int32,
    is_token_in_rank [tokens, ranks] bool)`` from ``topk_idx`` (entries -1 are no expert)."""
    import torch
    tokens = topk_idx.shape[0]
    # Entries -1 go to a column past the experts, dropped after (scattering False into expert 0
    # instead would race with the token's own expert 0).
    columns = torch.where(topk_idx >= 0, topk_idx, num_experts)
    membership = torch.zeros(tokens, num_experts + 1, dtype=torch.bool, device=topk_idx.device)
    membership.scatter_(1, columns, True)
    membership = membership[:, :num_experts]
    num_tokens_per_expert = membership.sum(0, dtype=torch.int32)
    is_token_in_rank = membership.reshape(tokens, num_ranks, num_experts // num_ranks).any(dim=2)
    num_tokens_per_rank = is_token_in_rank.sum(0, dtype=torch.int32)
    return num_tokens_per_rank, num_tokens_per_expert, is_token_in_rank


class NormalMode:
    """The normal-mode methods of ``Buffer`` (which provides ``world``, ``pool``, ``rank``,
    ``group_size``, ``normal_parts``, ``_begin`` and the compiled-kernel context)."""

    @staticmethod
    def get_normal_size_hint(num_max_tokens_per_rank: int, hidden: int, num_ranks: int, num_topk: int,
                             num_experts: int, use_fp8: bool = False) -> int:
        """Bytes of pool (``num_nvl_bytes``) the normal mode needs for up to
        ``num_max_tokens_per_rank`` tokens per rank (FP8 rows: ``hidden / 128`` scales)."""
        return NormalLayout.size_hint(num_max_tokens_per_rank, hidden, num_ranks, num_topk, num_experts, use_fp8)

    def get_dispatch_layout(self, topk_idx: Any, num_experts: int, previous_event: Any = None,
                            async_finish: bool = False,
                            allocate_on_comm_stream: bool = False) -> Tuple[Any, None, Any, Any, Any]:
        """DeepEP's layout step: ``(num_tokens_per_rank, None, num_tokens_per_expert,
        is_token_in_rank, event)``; the second (per RDMA rank) is None, as intranode."""
        import torch

        from .buffer import EventOverlap
        if topk_idx.dim() != 2 or topk_idx.dtype != torch.int64 or not topk_idx.is_cuda:
            raise ValueError(f"aboleth.moe.get_dispatch_layout: topk_idx must be a CUDA int64 tensor [tokens, k], "
                             f"got {tuple(topk_idx.shape)} {topk_idx.dtype} on {topk_idx.device}")
        if num_experts % self.group_size:
            raise ValueError(f"aboleth.moe.get_dispatch_layout: num_experts ({num_experts}) must be a multiple of "
                             f"the number of ranks ({self.group_size})")
        per_rank, per_expert, in_rank = dispatch_layout(topk_idx, num_experts, self.group_size)
        return per_rank, None, per_expert, in_rank, EventOverlap()

    def _normal_layout(self, hidden: int, topk: int, experts: int, element_bytes: int,
                       scales: int) -> NormalLayout:
        # One layout object per configuration: its parts are computed once, not on every call.
        key = (hidden, topk, experts, element_bytes, scales)
        layout = self._normal_layouts.get(key)
        if layout is None:
            if (hidden * element_bytes) % 16:
                raise ValueError(f"aboleth.moe.dispatch: a row of hidden={hidden} at {element_bytes} byte(s) per "
                                 "element must be a multiple of 16 bytes (as in DeepEP)")
            layout = NormalLayout(self.group_size, experts, hidden, topk, self.pool.numel(), element_bytes, scales)
            self._normal_layouts[key] = layout
        return layout

    def dispatch(self, x: Any, handle: Optional[NormalHandle] = None, num_tokens_per_rank: Any = None,
                 num_tokens_per_rdma_rank: Any = None, is_token_in_rank: Any = None,
                 num_tokens_per_expert: Any = None, topk_idx: Any = None, topk_weights: Any = None,
                 expert_alignment: int = 1, num_worst_tokens: int = 0, config: Any = None,
                 previous_event: Any = None, async_finish: bool = False,
                 allocate_on_comm_stream: bool = False) -> Tuple[Any, Any, Any, Any, Any, Any]:
        """Sends each token once to each rank holding one of its experts. ``x`` is BF16
        ``[tokens, hidden]`` or, for FP8, ``(x_e4m3 [tokens, hidden], scales f32 [tokens, s])``.
        Returns ``(recv_x, recv_topk_idx, recv_topk_weights, num_recv_tokens_per_expert_list,
        handle, event)``: the received rows are the sources in rank order, each source's tokens
        in token order; ``recv_topk_idx`` holds this rank's local expert ids (-1 for another
        rank's, weight 0). With ``handle`` (a cached dispatch) only ``x`` is sent again and
        ``(recv_x, None, None, None, None, event)`` comes back."""
        from . import normal_kernels
        import torch

        from .buffer import EventOverlap, triton_next_power_of_2 as _next_power_of_2
        fp8 = isinstance(x, tuple)
        x_data, scales = x if fp8 else (x, None)
        expected_dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
        if x_data.dim() != 2 or x_data.dtype != expected_dtype or not x_data.is_cuda or not x_data.is_contiguous():
            raise ValueError(f"aboleth.moe.dispatch: x must be a contiguous CUDA {expected_dtype} tensor [tokens, "
                             f"hidden]{' (the first of (x, scales))' if fp8 else ''}, got {tuple(x_data.shape)} "
                             f"{x_data.dtype} on {x_data.device}")
        tokens, hidden = x_data.shape
        scale_words = 0
        if fp8:
            if (scales.dim() != 2 or scales.shape[0] != tokens or scales.dtype != torch.float32
                    or not scales.is_contiguous() or scales.device != x_data.device):
                raise ValueError(f"aboleth.moe.dispatch: FP8 scales must be contiguous float32 [{tokens}, hidden / 128] "
                                 f"on {x_data.device}, got {tuple(scales.shape)} {scales.dtype} on {scales.device}")
            scale_words = scales.shape[1]
        ranks, rank = self.group_size, self.rank
        cached = handle is not None
        if cached:
            if not isinstance(handle, NormalHandle):
                raise ValueError("aboleth.moe.dispatch: handle must be what a normal dispatch returned")
            if tokens != handle.num_tokens:
                raise ValueError(f"aboleth.moe.dispatch: the cached dispatch's x has {tokens} tokens, its handle "
                                 f"{handle.num_tokens}")
            experts, topk = handle.layout.experts, handle.layout.topk
            topk_idx = topk_weights = None
        else:
            for name, value in (("num_tokens_per_rank", num_tokens_per_rank), ("is_token_in_rank", is_token_in_rank),
                                ("num_tokens_per_expert", num_tokens_per_expert)):
                if value is None:
                    raise ValueError(f"aboleth.moe.dispatch: {name} is required without a handle (from "
                                     "get_dispatch_layout)")
            if tuple(is_token_in_rank.shape) != (tokens, ranks) or is_token_in_rank.dtype != torch.bool:
                raise ValueError(f"aboleth.moe.dispatch: is_token_in_rank must be bool [{tokens}, {ranks}], got "
                                 f"{tuple(is_token_in_rank.shape)} {is_token_in_rank.dtype}")
            experts = num_tokens_per_expert.numel()
            if topk_idx is not None:
                if topk_idx.dim() != 2 or topk_idx.shape[0] != tokens or topk_idx.dtype != torch.int64:
                    raise ValueError(f"aboleth.moe.dispatch: topk_idx must be int64 [{tokens}, k], got "
                                     f"{tuple(topk_idx.shape)} {topk_idx.dtype}")
                if topk_idx.shape[1] < 1:
                    raise ValueError("aboleth.moe.dispatch: topk_idx needs at least one column (k >= 1)")
                if topk_weights is None or tuple(topk_weights.shape) != tuple(topk_idx.shape):
                    raise ValueError(f"aboleth.moe.dispatch: topk_weights must be given with topk_idx, "
                                     f"{tuple(topk_idx.shape)}")
                topk = topk_idx.shape[1]
                topk_idx = topk_idx.contiguous()
                topk_weights = topk_weights.to(torch.float32).contiguous()
            else:
                topk = 0
        if not isinstance(expert_alignment, int) or expert_alignment < 1:
            raise ValueError(f"aboleth.moe.dispatch: expert_alignment must be a positive integer, got "
                             f"{expert_alignment!r}")
        if not isinstance(num_worst_tokens, int) or num_worst_tokens < 0:
            raise ValueError(f"aboleth.moe.dispatch: num_worst_tokens must be a non-negative integer, got "
                             f"{num_worst_tokens!r}")
        layout = self._normal_layout(hidden, max(topk, 1), experts, 1 if fp8 else 2, scale_words)
        if cached and layout != handle.layout:
            raise ValueError("aboleth.moe.dispatch: a cached dispatch must send the same kind of x (hidden, BF16 or "
                             "FP8 with as many scales) as the dispatch that made its handle, on the same buffer")
        if tokens > layout.capacity:
            raise ValueError(f"aboleth.moe.dispatch: {tokens} tokens need {tokens} rows per destination but the "
                             f"pool ({self.pool.numel()} bytes) holds {layout.capacity} of {layout.row_stride} bytes "
                             f"per rank; nothing was sent. Pass num_nvl_bytes >= Buffer.get_normal_size_hint("
                             f"{tokens}, {hidden}, {ranks}, {max(topk, 1)}, {experts}, use_fp8={fp8})")
        self._begin("normal", "dispatch", layout)
        self._layout = layout
        parts = layout.parts()
        local_experts = layout.local_experts
        epochs = parts["epochs"][0]
        # The received layout (each source's first row, the total, the aligned per-expert
        # counts), then the error words: one copy to the host reads both.
        info_words = ranks + 1 + local_experts
        if cached:
            is_token_in_rank, positions = handle.is_token_in_rank, handle.positions
            send_tokens, num_tokens_per_expert = handle.send_tokens, handle.num_tokens_per_expert
            recv_info = torch.empty(info_words + ERROR_WORDS, dtype=torch.int64, device=x_data.device)
        else:
            # A view, no copy: the kernels read the bool bytes.
            is_token_in_rank = is_token_in_rank.contiguous().view(torch.uint8)
            num_tokens_per_expert = num_tokens_per_expert.contiguous()
            # recv_info, positions [tokens, ranks] and send_tokens [ranks, tokens] in one
            # allocation (the host's allocations bound a dispatch), each at an even word (16 bytes).
            info_span = (info_words + ERROR_WORDS + 1) // 2 * 2
            table_span = (tokens * ranks + 1) // 2 * 2
            scratch = torch.empty(info_span + 2 * table_span, dtype=torch.int64, device=x_data.device)
            recv_info = scratch[:info_words + ERROR_WORDS]
            positions = scratch[info_span:info_span + tokens * ranks].view(tokens, ranks)
            send_tokens = scratch[info_span + table_span:info_span + table_span + tokens * ranks].view(ranks, tokens)
        # With no tokens the scan reads nothing: the pool stands in for the empty tensors (the
        # kernels load send_tokens' entries as int64 whatever its type).
        send_tokens_argument = send_tokens if tokens else self.pool
        self._launcher(normal_kernels.normal_prepare)[(ranks,)](
            is_token_in_rank if tokens else self.pool, positions if tokens else self.pool,
            send_tokens_argument, num_tokens_per_expert, self.pool, recv_info, tokens, RANK=rank,
            RANKS=ranks, LOCAL_EXPERTS=local_experts, LOCAL_POW2=_next_power_of_2(local_experts),
            ROW_WORDS=layout.row_words, FINGERPRINT=layout.fingerprint, EPOCHS=epochs,
            SEND_COUNTS=parts["send_counts"][0], DISPATCH_COUNTS=parts["dispatch_counts"][0],
            INFO_WORDS=info_words + ERROR_WORDS, INFO_POW2=_next_power_of_2(info_words + ERROR_WORDS),
            BLOCK_TOKENS=BLOCK_TOKENS)
        x_words = x_data.view(torch.int32)
        scale_view = scales.view(torch.int32) if fp8 else x_words
        has_topk = topk_idx is not None  # a cached dispatch sends x (and scales) only
        # Absent tensors: x stands in (never read).
        topk_source = topk_idx if has_topk else positions
        weights_source = topk_weights if has_topk else x_words
        row = dict(K=max(topk, 1), X_WORDS=layout.x_bytes // 4, SCALE_WORDS=scale_words, HAS_TOPK=has_topk)
        copies = dict(ROW_STRIDE=layout.dispatch_stride, BLOCK_BYTES=layout.block_bytes,
                      BLOCK_WORDS=min(BLOCK_WORDS, _next_power_of_2(layout.x_bytes // 4)))
        counters = dict(RANK=rank, RANKS=ranks, ROW_WORDS=layout.row_words, CAPACITY=layout.capacity,
                        ROW_STRIDE=layout.dispatch_stride, BLOCK_BYTES=layout.block_bytes, PARTS=self.normal_parts,
                        DISPATCH_FLAGS=parts["dispatch_flags"][0], DISPATCH_COUNTS=parts["dispatch_counts"][0],
                        SEND_COUNTS=parts["send_counts"][0], RECV=parts["recv"][0])
        if tokens and not self.normal_direct:
            self._launcher(normal_kernels.normal_pack)[(tokens,)](
                x_words, scale_view, topk_source, weights_source, is_token_in_rank, positions, self.pool, RANK=rank,
                RANKS=ranks, SEND=parts["send"][0], **row, **copies)
        if self.normal_direct:
            self._aboleth_launcher(normal_kernels.normal_dispatch_direct)[((ranks - 1) * self.normal_parts,)](
                self.endpoints, self.regions, x_words, scale_view, topk_source, weights_source,
                send_tokens_argument, self.pool, self.pool_key, tokens, **counters, **row)
        else:
            self._aboleth_launcher(normal_kernels.normal_dispatch_send)[((ranks - 1) * self.normal_parts,)](
                self.endpoints, self.regions, self.pool, self.pool_key, SEND=parts["send"][0], **counters)
        self._sent()
        self._aboleth_launcher(normal_kernels.normal_dispatch_wait)[(1,)](
            self.endpoints, self.pool, recv_info, RANK=rank, RANKS=ranks,
            RANKS_POW2=_next_power_of_2(ranks), LOCAL_EXPERTS=local_experts,
            LOCAL_POW2=_next_power_of_2(local_experts), ROW_WORDS=layout.row_words, CAPACITY=layout.capacity,
            FINGERPRINT=layout.fingerprint, EXPERT_ALIGNMENT=expert_alignment,
            NUM_WORST=handle.num_worst_tokens if cached else num_worst_tokens, ERRORS=parts["errors"][0],
            EPOCHS=epochs, DISPATCH_FLAGS=parts["dispatch_flags"][0], DISPATCH_COUNTS=parts["dispatch_counts"][0],
            PARTS=self.normal_parts, WORST_ERROR_WORD=WORST_ERROR_WORD, ERROR_WORDS=ERROR_WORDS)
        if cached:
            num_rows, per_expert = handle.num_rows, handle.num_recv_tokens_per_expert_list
        elif num_worst_tokens:
            num_rows, per_expert = num_worst_tokens, []
        else:
            # The one host synchronization: the outputs' size. A wait that gave up, or a peer
            # with another configuration, is raised here rather than returned as rows.
            self._wait_for_stream()  # before a blocking copy to the host (see Buffer._wait_for_stream)
            info = recv_info.tolist()
            self._raise_recorded(info[info_words:])
            num_rows, per_expert = info[ranks], info[ranks + 1:info_words]
        device = x_data.device
        recv_x = torch.empty(num_rows, hidden, dtype=x_data.dtype, device=device)
        recv_scales = torch.empty(num_rows, scale_words, dtype=torch.float32, device=device) if fp8 else None
        recv_topk_idx = torch.empty(num_rows, topk, dtype=torch.int64, device=device) if has_topk else None
        recv_topk_weights = torch.empty(num_rows, topk, dtype=torch.float32, device=device) if has_topk else None
        if num_rows:
            recv_x_words = recv_x.view(torch.int32)
            self._launcher(normal_kernels.normal_dispatch_receive)[(num_rows,)](
                self.pool, recv_info, send_tokens_argument, x_words, scale_view, topk_source,
                weights_source, recv_x_words, recv_scales.view(torch.int32) if fp8 else recv_x_words,
                recv_topk_idx if has_topk else recv_info, recv_topk_weights if has_topk else recv_x_words, tokens,
                K_POW2=_next_power_of_2(max(topk, 1)), RANK=rank, RANKS=ranks, RANKS_POW2=_next_power_of_2(ranks),
                LOCAL_EXPERTS=local_experts, RECV=parts["recv"][0], **row, **copies)
        received = (recv_x, recv_scales) if fp8 else recv_x
        if cached:
            return received, None, None, None, None, EventOverlap()
        new_handle = NormalHandle(layout, is_token_in_rank, positions, send_tokens, num_tokens_per_expert, recv_info,
                                  num_rows, num_worst_tokens, tokens, per_expert)
        return received, recv_topk_idx, recv_topk_weights, per_expert, new_handle, EventOverlap()

    def combine(self, x: Any, handle: NormalHandle, topk_weights: Any = None, bias: Any = None, config: Any = None,
                previous_event: Any = None, async_finish: bool = False,
                allocate_on_comm_stream: bool = False) -> Tuple[Any, Any, Any]:
        """Sends the expert outputs ``x`` (BF16, one row per received row of the dispatch) back
        to their tokens' ranks, which sum them per token over the ranks in rank order, in FP32,
        rounded to BF16 once; ``bias`` (a BF16 ``[tokens, hidden]`` tensor or a pair of them, as in
        DeepEP) is added to the FP32 sum before that rounding, the first then the second. Returns
        ``(combined_x [tokens, hidden], combined_topk_weights [tokens, k] or None, event)``; the
        weights are summed the same way."""
        from . import normal_kernels
        import torch

        from .buffer import EventOverlap, triton_next_power_of_2 as _next_power_of_2
        if not isinstance(handle, NormalHandle) or handle.layout.pool_bytes != self.pool.numel():
            raise ValueError("aboleth.moe.combine: handle must be what a normal dispatch of this Buffer returned")
        layout = handle.layout
        expected = (handle.num_rows, layout.hidden)
        if tuple(x.shape) != expected or x.dtype != torch.bfloat16 or not x.is_cuda:
            raise ValueError(f"aboleth.moe.combine: x must be a CUDA bfloat16 tensor {list(expected)} (one row per "
                             f"received row), got {tuple(x.shape)} {x.dtype} on {x.device}")
        # DeepEP's pair may hold None for an absent bias.
        biases = [value for value in ([] if bias is None else list(bias) if isinstance(bias, (tuple, list))
                                      else [bias]) if value is not None]
        if len(biases) > 2:
            raise ValueError(f"aboleth.moe.combine: bias is a tensor or a pair of tensors, got {len(biases)}")
        for index, value in enumerate(biases):
            shape = (handle.num_tokens, layout.hidden)
            if (not hasattr(value, "shape") or tuple(value.shape) != shape or value.dtype != torch.bfloat16
                    or not value.is_cuda or not value.is_contiguous()):
                raise ValueError(f"aboleth.moe.combine: bias[{index}] must be a contiguous CUDA bfloat16 tensor "
                                 f"{list(shape)} (one row per token of the dispatch), got "
                                 f"{tuple(getattr(value, 'shape', ()))} {getattr(value, 'dtype', type(value))}")
        has_weights = topk_weights is not None
        if has_weights and (topk_weights.dim() != 2 or topk_weights.shape[0] != handle.num_rows
                            or topk_weights.shape[1] > layout.topk):
            raise ValueError(f"aboleth.moe.combine: topk_weights must be [{handle.num_rows}, k <= {layout.topk}] like "
                             f"the dispatch's recv_topk_weights, got {tuple(topk_weights.shape)}")
        self._begin("normal", "combine", layout)
        self._layout = layout
        parts = layout.parts()
        ranks, rank = layout.ranks, self.rank
        k = topk_weights.shape[1] if has_weights else 1
        x = x.contiguous()
        weights = topk_weights.to(torch.float32).contiguous() if has_weights else handle.recv_info
        epochs = parts["epochs"][0]  # normal_combine_wait advances the combine epoch
        hidden_words = layout.hidden // 2
        x_words = x.view(torch.int32)
        sending = dict(K=k, RANK=rank, RANKS=ranks, CAPACITY=layout.capacity, ROW_STRIDE=layout.combine_stride,
                       BLOCK_BYTES=layout.block_bytes, PARTS=self.normal_parts,
                       COMBINE_FLAGS=parts["combine_flags"][0], SEND=parts["send"][0])
        if handle.num_rows and not self.normal_direct:
            self._launcher(normal_kernels.normal_combine_pack)[(handle.num_rows,)](
                self.pool, handle.recv_info, x_words, weights, K=k, K_POW2=_next_power_of_2(k), RANK=rank,
                RANKS=ranks, RANKS_POW2=_next_power_of_2(ranks), HIDDEN_WORDS=hidden_words,
                ROW_STRIDE=layout.combine_stride, BLOCK_BYTES=layout.block_bytes, RECV=parts["recv"][0],
                HAS_WEIGHTS=has_weights, BLOCK_WORDS=min(BLOCK_WORDS, _next_power_of_2(hidden_words)))
        if self.normal_direct:
            self._aboleth_launcher(normal_kernels.normal_combine_direct)[((ranks - 1) * self.normal_parts,)](
                self.endpoints, self.regions, x_words, weights, handle.recv_info, self.pool_key,
                HIDDEN_WORDS=hidden_words, HAS_WEIGHTS=has_weights, **sending)
        else:
            sending.pop("K")
            self._aboleth_launcher(normal_kernels.normal_combine_send)[((ranks - 1) * self.normal_parts,)](
                self.endpoints, self.regions, self.pool, self.pool_key, handle.recv_info, RECV=parts["recv"][0],
                **sending)
        self._aboleth_launcher(normal_kernels.normal_combine_wait)[(1,)](
            self.endpoints, self.pool, RANK=rank, RANKS=ranks, ERRORS=parts["errors"][0], EPOCHS=epochs,
            COMBINE_FLAGS=parts["combine_flags"][0], PARTS=self.normal_parts)
        # After the wait, which advances the combine epoch: a raise before here leaves this
        # rank's epoch or its peers' counters behind, and stops the Buffer.
        self._sent()
        tokens = handle.num_tokens
        combined = torch.empty(tokens, layout.hidden, dtype=torch.bfloat16, device=x.device)
        combined_weights = torch.empty(tokens, k, dtype=torch.float32, device=x.device) if has_weights else None
        if tokens:
            block = min(BLOCK_HIDDEN, _next_power_of_2(layout.hidden))
            # Absent biases: the output stands in (never read).
            bias_0, bias_1 = (biases + [combined, combined])[:2]
            self._launcher(normal_kernels.normal_combine_reduce)[(tokens, (layout.hidden + block - 1) // block)](
                self.pool, handle.is_token_in_rank, handle.positions, handle.recv_info, x, weights, combined,
                combined_weights if has_weights else combined, bias_0, bias_1, K=k, K_POW2=_next_power_of_2(k),
                RANK=rank, RANKS=ranks, HIDDEN=layout.hidden, ROW_STRIDE=layout.combine_stride,
                BLOCK_BYTES=layout.block_bytes, SEND=parts["send"][0], HAS_WEIGHTS=has_weights,
                BIASES=len(biases), BLOCK_HIDDEN=block)
        return combined, combined_weights, EventOverlap()
