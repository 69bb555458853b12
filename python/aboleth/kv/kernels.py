"""The KV-cache transfer's kernels: Triton, with ``aboleth.language`` for the communication.

Two kernels (``aboleth/kv/transfer.py`` launches them):

- :func:`send_layer` (``parts`` programs, one peer): for one layer, one put per run of blocks
  and plane (a run is consecutive source blocks going to consecutive destination blocks: three
  int64 tables give each run's first source block, first destination block and length, loaded
  from memory; a plane is K or V), then one counter add on the peer's flag of
  (layer, this rank), then a drain: the source blocks may be freed and rewritten once the
  launch is over. The compiler sees a runtime-sized loop of puts and an add on one endpoint:
  one batch and one doorbell per program on the queue transports, the add ordered behind the
  puts as the transport requires, and the one completion the drain asks for. At most
  ``MAX_RUNS`` runs per launch (the bound lets the compiler reserve slots for the whole loop at
  once); a longer list takes several launches, and only the last (``SIGNAL``) adds: the earlier
  ones drained before it started, so the add still publishes every block;
- :func:`wait_layer` (one program): a bounded wait for the flag of (layer, source) to reach
  a target (the transfers expected from the source times the sender's programs), so that the
  receiver's next kernel on the stream reads the blocks only once they are there. A wait that
  gives up is recorded in the World's wait-failure log with the flag's address, from which
  ``Transfer.check`` names the layer and the peer.

What they do not do: copy within a rank (a rank never sends to itself), or check block ids
(``Transfer`` checks them on the host before anything is launched).
"""

import triton
import triton.language as tl

import aboleth.language as aboleth

@triton.jit
def send_layer_programs(endpoints, cache_regions, flag_regions, cache, cache_key, run_sources, run_destinations,
                        run_blocks, run_count, peer, part, layer, local_plane_bytes, peer_plane_bytes,
                        RANK: tl.constexpr, RANKS: tl.constexpr, PLANES: tl.constexpr, BLOCK_BYTES: tl.constexpr,
                        PARTS: tl.constexpr, MAX_RUNS: tl.constexpr, SIGNAL: tl.constexpr):
    """Program ``part`` of :func:`send_layer`'s ``PARTS``: runs ``part``, ``part + PARTS``, ...
    (the simulator's test kernels call it with the peer and part they choose)."""
    ep = aboleth.endpoint(endpoints, peer)
    peer_cache = aboleth.remote(cache_regions, peer)
    peer_flags = aboleth.remote(flag_regions, peer, tl.int64)
    cache_bytes = cache.to(tl.pointer_type(tl.uint8))  # offsets count bytes whatever the cache's dtype
    # At most MAX_RUNS runs per launch (Transfer splits longer lists over launches): the bound
    # lets the compiler reserve queue slots for the whole loop and the add at once.
    for index in range(part, tl.minimum(run_count, MAX_RUNS), PARTS):
        source_block = tl.load(run_sources + index)
        destination_block = tl.load(run_destinations + index)
        nbytes = tl.load(run_blocks + index) * BLOCK_BYTES
        for plane in tl.static_range(PLANES):
            source = cache_bytes + (plane * local_plane_bytes + source_block * BLOCK_BYTES)
            destination = peer_cache.at(plane * peer_plane_bytes + destination_block * BLOCK_BYTES)
            aboleth.put(ep, destination, source, nbytes, source_key=cache_key)
    if SIGNAL:
        # One add per program: the receiver waits for (transfers expected) * PARTS.
        aboleth.signal(ep, peer_flags.at(layer * RANKS + RANK), 1, op="add")
    aboleth.drain(ep)  # the source blocks are reused once the request is done


# The integers that vary from call to call are not specialized (Triton would compile a variant
# for a value of 1 or a multiple of 16); the plane sizes stay specialized: constant per
# Transfer, their divisibility lets the p2p copies use 16-byte vectors.
@triton.jit(do_not_specialize=["run_count", "peer", "layer"])
def send_layer(endpoints, cache_regions, flag_regions, cache, cache_key, run_sources, run_destinations, run_blocks,
               run_count, peer, layer, local_plane_bytes, peer_plane_bytes, RANK: tl.constexpr,
               RANKS: tl.constexpr, PLANES: tl.constexpr, BLOCK_BYTES: tl.constexpr, PARTS: tl.constexpr,
               MAX_RUNS: tl.constexpr, SIGNAL: tl.constexpr):
    send_layer_programs(endpoints, cache_regions, flag_regions, cache, cache_key, run_sources, run_destinations,
                        run_blocks, run_count, peer, tl.program_id(0), layer, local_plane_bytes, peer_plane_bytes,
                        RANK, RANKS, PLANES, BLOCK_BYTES, PARTS, MAX_RUNS, SIGNAL)


@triton.jit(do_not_specialize=["layer", "source", "target"])
def wait_layer(endpoints, flags, layer, source, target, RANKS: tl.constexpr):
    # The endpoint gives the wait its bound and failure log (and names the peer in it).
    aboleth.endpoint(endpoints, source)
    aboleth.wait_signal(flags + layer * RANKS + source, target)
