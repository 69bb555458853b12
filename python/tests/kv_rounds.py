"""aboleth.kv's sending kernel followed by the receivers' waits, as one kernel, for the
simulator (test_kv.py): ``transfer_round`` has ``parts`` programs per peer; each sends two
layers (two cache regions) of its runs to its peer with ``send_layer_programs`` (layer 0 as two
chunks, the first without a signal, as ``Transfer`` splits a long list over launches; run counts
are runtime arguments, so the loop's bound is the kernel's ``min(run_count, MAX_RUNS)``), then
every program waits for every peer's flag of both layers, as ``wait_layer`` does. Rank ``r`` reads
its runs at ``r * RUNS`` in each table, so that with ``sequence`` destinations two source ranks
never write the same block of a peer; its source blocks start at ``SOURCE_BLOCK`` (past every
destination), so that no block is read while a peer writes it."""

import triton
import triton.language as tl

import aboleth.language as aboleth
from aboleth.kv.kernels import send_layer_programs


@triton.jit
def transfer_round(endpoints, layer0_regions, layer1_regions, flag_regions, layer0, layer1, flags, layer0_key, layer1_key,
                   run_sources, run_destinations, run_blocks, plane_bytes, first_runs, last_runs, epoch, RANK: tl.constexpr,
                   RANKS: tl.constexpr, RUNS: tl.constexpr, PLANES: tl.constexpr, BLOCK_BYTES: tl.constexpr,
                   PARTS: tl.constexpr, SOURCE_BLOCK: tl.constexpr, MAX_RUNS: tl.constexpr):
    pid = tl.program_id(0)
    index = pid // PARTS
    peer = index + (index >= RANK).to(tl.int32)
    part = pid % PARTS
    # The source blocks start past every rank's destination blocks.
    layer0_sources = layer0.to(tl.pointer_type(tl.uint8)) + SOURCE_BLOCK * BLOCK_BYTES
    layer1_sources = layer1.to(tl.pointer_type(tl.uint8)) + SOURCE_BLOCK * BLOCK_BYTES
    sources = run_sources + RANK * RUNS
    destinations = run_destinations + RANK * RUNS
    blocks = run_blocks + RANK * RUNS
    # Layer 0 as two launches of a longer list: the first chunk's runs without a signal (its
    # drain completes them), then the rest with the signal. Layer 1 in one.
    send_layer_programs(endpoints, layer0_regions, flag_regions, layer0_sources, layer0_key, sources, destinations,
                        blocks, first_runs, peer, part, 0, plane_bytes, plane_bytes, RANK, RANKS, PLANES,
                        BLOCK_BYTES, PARTS, MAX_RUNS, False)
    send_layer_programs(endpoints, layer0_regions, flag_regions, layer0_sources, layer0_key, sources + first_runs,
                        destinations + first_runs, blocks + first_runs, last_runs, peer, part, 0, plane_bytes,
                        plane_bytes, RANK, RANKS, PLANES, BLOCK_BYTES, PARTS, MAX_RUNS, True)
    send_layer_programs(endpoints, layer1_regions, flag_regions, layer1_sources, layer1_key, sources, destinations,
                        blocks, first_runs + last_runs, peer, part, 1, plane_bytes, plane_bytes, RANK, RANKS, PLANES,
                        BLOCK_BYTES, PARTS, MAX_RUNS, True)
    for layer in range(2):
        for source in range(RANKS):
            if source != RANK:
                aboleth.wait_signal(flags + layer * RANKS + source, epoch * PARTS)
