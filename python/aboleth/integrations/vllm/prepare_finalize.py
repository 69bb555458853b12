"""vLLM's ``FusedMoEPrepareAndFinalizeModular`` over ``aboleth.moe``: prepare = (quantize,)
dispatch; finalize = (weigh and reduce,) combine.

- :class:`AbolethPrepareAndFinalize` (``--all2all-backend aboleth``): the normal mode, vLLM's
  Standard activation format (one row per received token). FP8 with 128-wide block scales is
  quantized before the dispatch and sent as FP8 with its scales (the dispatch moves about half
  the bytes); any other quantization is applied after the dispatch, to the received rows. The
  received top-k ids are local expert ids (-1 for another rank's): they are moved back to the
  global expert space and -1 becomes an expert of another rank, which vLLM's ``expert_map``
  then drops (as vLLM's DeepEP adapter does). The experts' outputs are weighed and reduced per
  received token first (vLLM's contiguous reduction), then the combine sums each token's rows
  over the ranks in rank order.
- :class:`AbolethLowLatencyPrepareAndFinalize` (``aboleth_low_latency``): the low-latency mode,
  BatchedExperts format ``[local experts, ranks x max tokens, hidden]``. The dispatch sends BF16
  (the low-latency FP8 dispatch is not built) and quantizes the received rows when the experts
  want them quantized; the combine applies the top-k weights.

Both are synchronous (``supports_async()`` is False: vLLM's dual-batch overlap interleaves two
dispatches, which an ``aboleth.moe.Buffer`` orders with a host barrier). What ``aboleth.moe``
itself does and does not do: docs/COMPILED_MOE.md.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
import vllm.model_executor.layers.fused_moe.modular_kernel as mk
from vllm.model_executor.layers.fused_moe.topk_weight_and_reduce import (
    TopKWeightAndReduceContiguous,
    TopKWeightAndReduceDelegate,
)
from vllm.model_executor.layers.fused_moe.utils import moe_kernel_quantize_input, normalize_batched_scales_shape

#: The FP8 block the normal mode's dispatch carries scales for (one per 128 channels).
FP8_BLOCK = 128
#: A row's bytes must be a multiple of this (``aboleth.moe``'s copies move 16-byte vectors).
ROW_BYTES_MULTIPLE = 16


def _fp8_dtype() -> torch.dtype:
    from vllm.platforms import current_platform
    return current_platform.fp8_dtype()


def _dispatches_fp8(quant_config: Any) -> bool:
    """Whether the activations are quantized before the normal dispatch and sent as FP8 with
    block scales: FP8 quantization in blocks of 128 channels."""
    return (quant_config is not None and quant_config.quant_dtype == _fp8_dtype()
            and quant_config.is_block_quantized and list(quant_config.block_shape)[-1] == FP8_BLOCK)


def _check_apply_router_weight_on_input(a1: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor,
                                        apply_router_weight_on_input: bool) -> torch.Tensor:
    if not apply_router_weight_on_input:
        return a1
    if topk_ids.size(1) != 1:
        raise ValueError(f"aboleth: apply_router_weight_on_input needs top-1 routing (the weight scales the token "
                         f"before it is sent), got top-{topk_ids.size(1)}")
    return a1 * topk_weights.to(a1.dtype)


class AbolethPrepareAndFinalize(mk.FusedMoEPrepareAndFinalizeModular):
    """The normal (throughput) mode; see the module docstring."""

    @staticmethod
    def maybe_roundup_layer_hidden_size(hidden_size: int, dtype: torch.dtype) -> int:
        """The hidden size a layer pads to so that a row is whole 16-byte vectors."""
        elements = max(ROW_BYTES_MULTIPLE // dtype.itemsize, 1)
        return -(-hidden_size // elements) * elements

    def __init__(self, buffer: Any, num_dispatchers: int, rank_expert_offset: int) -> None:
        super().__init__()
        self.buffer = buffer
        self.num_dispatchers_ = num_dispatchers
        self.rank_expert_offset = rank_expert_offset
        self.handle: Any = None

    @property
    def activation_format(self) -> mk.FusedMoEActivationFormat:
        return mk.FusedMoEActivationFormat.Standard

    def topk_indices_dtype(self) -> Optional[torch.dtype]:
        return torch.int64

    def max_num_tokens_per_rank(self) -> Optional[int]:
        return None

    def num_dispatchers(self) -> int:
        return self.num_dispatchers_

    def output_is_reduced(self) -> bool:
        return True

    def prepare(self, a1: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor, num_experts: int,
                expert_map: Optional[torch.Tensor], apply_router_weight_on_input: bool, quant_config: Any,
                defer_input_quant: bool = False) -> mk.PrepareResultType:
        a1 = _check_apply_router_weight_on_input(a1, topk_weights, topk_ids, apply_router_weight_on_input)
        fp8 = _dispatches_fp8(quant_config) and not defer_input_quant
        if fp8:
            a1q, scales = moe_kernel_quantize_input(a1, quant_config.a1_scale, quant_dtype=quant_config.quant_dtype,
                                                    per_act_token_quant=quant_config.per_act_token_quant,
                                                    block_shape=quant_config.block_shape)
            x: Any = (a1q, scales.to(torch.float32).contiguous())
        else:
            x = a1
        topk_ids = topk_ids.to(torch.int64)
        num_tokens_per_rank, _, num_tokens_per_expert, is_token_in_rank, _ = self.buffer.get_dispatch_layout(
            topk_ids, num_experts)
        received, recv_topk_ids, recv_topk_weights, per_expert, handle, _ = self.buffer.dispatch(
            x, num_tokens_per_rank=num_tokens_per_rank, is_token_in_rank=is_token_in_rank,
            num_tokens_per_expert=num_tokens_per_expert, topk_idx=topk_ids, topk_weights=topk_weights)
        self.handle = handle
        expert_x, expert_x_scale = received if fp8 else (received, None)
        # Back to the global expert space; another rank's expert (-1) becomes one that this
        # rank's expert_map drops.
        elsewhere = num_experts - 1 if self.rank_expert_offset == 0 else 0
        recv_topk_ids = torch.where(recv_topk_ids == -1, elsewhere, recv_topk_ids + self.rank_expert_offset)
        expert_tokens_meta = mk.ExpertTokensMetadata.make_from_list(per_expert, device=expert_x.device)
        if (not fp8 and quant_config is not None and quant_config.quant_dtype is not None and not defer_input_quant
                and expert_x.numel()):
            expert_x, expert_x_scale = moe_kernel_quantize_input(
                expert_x, quant_config.a1_scale, quant_dtype=quant_config.quant_dtype, per_act_token_quant=False,
                block_shape=quant_config.block_shape)
        return expert_x, expert_x_scale, expert_tokens_meta, recv_topk_ids, recv_topk_weights

    def finalize(self, output: torch.Tensor, fused_expert_output: torch.Tensor, topk_weights: torch.Tensor,
                 topk_ids: torch.Tensor, apply_router_weight_on_input: bool,
                 weight_and_reduce_impl: mk.TopKWeightAndReduce) -> None:
        if self.handle is None:
            raise RuntimeError("aboleth: finalize before prepare: the combine needs its dispatch's handle")
        if fused_expert_output.numel():
            if isinstance(weight_and_reduce_impl, TopKWeightAndReduceDelegate):
                weight_and_reduce_impl = TopKWeightAndReduceContiguous()
            fused_expert_output = weight_and_reduce_impl.apply(
                output=None, fused_expert_output=fused_expert_output, topk_weights=topk_weights,
                topk_ids=topk_ids, apply_router_weight_on_input=apply_router_weight_on_input)
        else:  # no token reached this rank: the combine still takes part
            fused_expert_output = fused_expert_output.reshape(0, self.handle.layout.hidden)
        combined, _, _ = self.buffer.combine(fused_expert_output.to(torch.bfloat16), self.handle)
        output.copy_(combined, non_blocking=True)


class AbolethLowLatencyPrepareAndFinalize(mk.FusedMoEPrepareAndFinalizeModular):
    """The low-latency mode; see the module docstring."""

    def __init__(self, buffer: Any, max_tokens_per_rank: int, num_dispatchers: int) -> None:
        super().__init__()
        self.buffer = buffer
        self.max_tokens_per_rank = max_tokens_per_rank
        self.num_dispatchers_ = num_dispatchers
        self.handle: Any = None

    @property
    def activation_format(self) -> mk.FusedMoEActivationFormat:
        return mk.FusedMoEActivationFormat.BatchedExperts

    def topk_indices_dtype(self) -> Optional[torch.dtype]:
        return torch.int64

    def max_num_tokens_per_rank(self) -> Optional[int]:
        return self.max_tokens_per_rank

    def num_dispatchers(self) -> int:
        return self.num_dispatchers_

    def output_is_reduced(self) -> bool:
        return True

    def prepare(self, a1: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor, num_experts: int,
                expert_map: Optional[torch.Tensor], apply_router_weight_on_input: bool, quant_config: Any,
                defer_input_quant: bool = False) -> mk.PrepareResultType:
        a1 = _check_apply_router_weight_on_input(a1, topk_weights, topk_ids, apply_router_weight_on_input)
        if a1.dtype != torch.bfloat16:
            raise ValueError(f"aboleth: the low-latency dispatch sends bfloat16 activations, got {a1.dtype}")
        expert_x, expert_num_tokens, handle, _, _ = self.buffer.low_latency_dispatch(
            a1, topk_ids.to(torch.int64), self.max_tokens_per_rank, num_experts, use_fp8=False)
        self.handle = handle
        expert_x_scale = None
        if quant_config is not None and quant_config.quant_dtype is not None and not defer_input_quant:
            local_experts, rows, hidden = expert_x.shape
            flat, expert_x_scale = moe_kernel_quantize_input(
                expert_x.view(-1, hidden), quant_config.a1_scale, quant_config.quant_dtype,
                quant_config.per_act_token_quant, quant_config.block_shape)
            expert_x = flat.view(local_experts, rows, -1)
            expert_x_scale = normalize_batched_scales_shape(expert_x_scale, local_experts)
        meta = mk.ExpertTokensMetadata(expert_num_tokens=expert_num_tokens, expert_num_tokens_cpu=None)
        return expert_x, expert_x_scale, meta, None, None

    def finalize(self, output: torch.Tensor, fused_expert_output: torch.Tensor, topk_weights: torch.Tensor,
                 topk_ids: torch.Tensor, apply_router_weight_on_input: bool,
                 weight_and_reduce_impl: mk.TopKWeightAndReduce) -> None:
        if self.handle is None:
            raise RuntimeError("aboleth: finalize before prepare: the combine needs its dispatch's handle")
        if not isinstance(weight_and_reduce_impl, TopKWeightAndReduceDelegate):
            raise ValueError("aboleth: the low-latency combine applies the top-k weights itself; the experts must "
                             f"leave the reduction to it (TopKWeightAndReduceDelegate), got "
                             f"{type(weight_and_reduce_impl).__name__}")
        weights = torch.ones_like(topk_weights) if apply_router_weight_on_input else topk_weights
        layout = self.handle.layout
        expert_output = fused_expert_output.view(layout.local_experts, layout.ranks * layout.max_tokens, layout.hidden)
        if output.dtype == torch.bfloat16 and output.is_contiguous():
            self.buffer.low_latency_combine(expert_output, topk_ids.to(torch.int64), weights, self.handle, out=output)
        else:
            combined, _, _ = self.buffer.low_latency_combine(expert_output, topk_ids.to(torch.int64), weights,
                                                             self.handle)
            output.copy_(combined)


def make_prepare_finalize(moe: Any, quant_config: Any, all2all_manager: Any) -> mk.FusedMoEPrepareAndFinalizeModular:
    """What the patched ``maybe_make_prepare_finalize`` returns for the aboleth backends: the
    class of the manager's mode over the manager's Buffer for this layer (``moe``: vLLM's
    ``FusedMoEConfig``)."""
    ranks = all2all_manager.world_size
    buffer = all2all_manager.get_handle(dict(max_num_tokens_per_rank=moe.max_num_tokens, hidden=moe.hidden_dim,
                                             num_topk=moe.experts_per_token, num_experts=moe.num_experts))
    if all2all_manager.mode == "low_latency":
        return AbolethLowLatencyPrepareAndFinalize(buffer, max_tokens_per_rank=moe.max_num_tokens,
                                                   num_dispatchers=ranks)
    return AbolethPrepareAndFinalize(buffer, num_dispatchers=ranks,
                                     rank_expert_offset=all2all_manager.rank * moe.num_local_experts)
