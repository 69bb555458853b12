"""What ``aboleth.kv.Transfer`` works out on the host before it launches anything: the block
geometry of a layer's cache, and a request's block tables turned into runs.

A cache is ``[2, num_blocks, ...]`` (``planes=2``: K then V, vLLM's FlashAttention layout) or
``[num_blocks, ...]`` (``planes=1``: one plane per layer, such as MLA's latent cache or a
layout that keeps a block's K and V together); a block is everything after the block index,
``block_bytes`` contiguous bytes. A run is ``blocks`` consecutive source blocks that go to
``blocks`` consecutive destination blocks: one put per run and plane.

What this module does not do: touch a GPU, or know about peers (``transfer.py`` does).
"""

from __future__ import annotations

from typing import Iterable, List, Sequence, Tuple


def cache_geometry(name: str, shape: Sequence[int], element_bytes: int, planes: int) -> Tuple[int, int]:
    """``(num_blocks, block_bytes)`` of a cache tensor of ``shape``; ``ValueError`` naming the
    layer ``name`` and the layout rule when the shape does not fit ``planes``."""
    if planes not in (1, 2):
        raise ValueError(f"aboleth.kv: planes must be 1 ([num_blocks, ...]) or 2 ([2, num_blocks, ...]: K and V), "
                         f"got {planes!r}")
    shape = tuple(int(size) for size in shape)
    if planes == 2:
        if len(shape) < 2 or shape[0] != 2:
            raise ValueError(f"aboleth.kv: layer {name}'s cache has shape {list(shape)}, and planes=2 needs "
                             "[2, num_blocks, ...] (K then V, vLLM's FlashAttention layout); pass planes=1 for "
                             "[num_blocks, ...]")
        num_blocks, rest = shape[1], shape[2:]
    else:
        if len(shape) < 1:
            raise ValueError(f"aboleth.kv: layer {name}'s cache is a scalar; a cache is [num_blocks, ...]")
        num_blocks, rest = shape[0], shape[1:]
    block_bytes = element_bytes
    for size in rest:
        block_bytes *= size
    if num_blocks <= 0 or block_bytes <= 0:
        raise ValueError(f"aboleth.kv: layer {name}'s cache has shape {list(shape)}: it holds no block")
    return num_blocks, block_bytes


def _block_ids(what: str, blocks: Iterable[int]) -> List[int]:
    if hasattr(blocks, "tolist"):
        blocks = blocks.tolist()
    try:
        ids = [int(block) for block in blocks]
    except (TypeError, ValueError):
        raise TypeError(f"aboleth.kv: {what} must be a list (or CPU tensor) of block ids, got "
                        f"{type(blocks).__name__}") from None
    return ids


def block_runs(source_blocks: Iterable[int], destination_blocks: Iterable[int], source_num_blocks: int,
               destination_num_blocks: int, max_run_blocks: int, peer: int) -> List[Tuple[int, int, int]]:
    """The runs ``(first source block, first destination block, blocks)`` that move block
    ``source_blocks[i]`` to ``destination_blocks[i]`` for every ``i``, in order, each at most
    ``max_run_blocks`` long (0: no limit). ``ValueError`` naming the entry and the rule for
    lists of different lengths, an id outside a cache, or a destination block given twice (two
    writes of one block in one transfer: which one lands would be up to the transport)."""
    sources = _block_ids("source_blocks", source_blocks)
    destinations = _block_ids("destination_blocks", destination_blocks)
    if len(sources) != len(destinations):
        raise ValueError(f"aboleth.kv: {len(sources)} source blocks but {len(destinations)} destination blocks: "
                         f"every source block needs the block of rank {peer}'s cache it goes to")
    seen = set()
    for index, (source, destination) in enumerate(zip(sources, destinations)):
        if not 0 <= source < source_num_blocks:
            raise ValueError(f"aboleth.kv: source_blocks[{index}] = {source} is outside this rank's cache "
                             f"({source_num_blocks} blocks)")
        if not 0 <= destination < destination_num_blocks:
            raise ValueError(f"aboleth.kv: destination_blocks[{index}] = {destination} is outside rank {peer}'s "
                             f"cache ({destination_num_blocks} blocks)")
        if destination in seen:
            raise ValueError(f"aboleth.kv: destination_blocks[{index}] = {destination} is given twice: a transfer "
                             "writes each destination block once")
        seen.add(destination)
    runs: List[Tuple[int, int, int]] = []
    for source, destination in zip(sources, destinations):
        if runs:
            first_source, first_destination, blocks = runs[-1]
            if (source == first_source + blocks and destination == first_destination + blocks
                    and (max_run_blocks <= 0 or blocks < max_run_blocks)):
                runs[-1] = (first_source, first_destination, blocks + 1)
                continue
        runs.append((source, destination, 1))
    return runs
