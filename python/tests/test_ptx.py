"""PTX of compiled kernels: the orderings, atomics and doorbells the passes planned, and no more.

16 put+signal chains on one (shared) queue, for the proxy: with the passes, one reservation,
one in-order publication and one doorbell for the whole batch; library-style, 16 of each. And the
software pipeliner: with num_stages=3 it prefetches a K loop's tiles as async copies, but not
when each step first waits for its tile's flag.
"""

import json

import aboleth
import ptx_kernels
from helpers import compile_kernel


def count(ptx: str, instruction: str) -> int:
    """Occurrences of ``instruction`` outside the failure records of bounded waits (each wait
    that gives up claims a record with an atomic add to ``%ab_slot`` and publishes it with a
    release store to ``[%ab_rec]``)."""
    return sum(line.count(instruction) for line in ptx.splitlines()
               if "%ab_slot" not in line and "%ab_rec" not in line)


def ptx_of(target: str, passes_off: bool) -> str:
    aboleth.install(target=target, passes_off=passes_off)
    try:
        kernel = compile_kernel(ptx_kernels.stream16, ptx_kernels.STREAM16_SIGNATURE,
                                ptx_kernels.STREAM16_CONSTEXPRS)
    finally:
        aboleth.uninstall()
    assert kernel.asm["cubin"]
    return kernel.asm["ptx"]


def test_sixteen_chains_on_the_proxy_ring_one_doorbell_with_the_passes():
    ptx = ptx_of("proxy", passes_off=False)
    # The queue is shared (the grid is not known to be 1): atomic reservation and max doorbell.
    assert count(ptx, "atom.relaxed.sys.global.add.u64") == 1
    assert count(ptx, "atom.release.sys.global.max.u64") == 1
    assert count(ptx, "st.release.sys.global.u64") == 1  # the in-order publication
    assert ptx.count("fence.sc.sys") == 1
    # 32 ring entries (16 puts, 16 signals), each ending with its sequence word.
    assert ptx.count("st.global.v2.u64") == 32 * 3


def test_sixteen_chains_library_style_pay_sixteen_doorbells():
    ptx = ptx_of("proxy", passes_off=True)
    assert count(ptx, "atom.relaxed.sys.global.add.u64") == 16
    assert count(ptx, "atom.release.sys.global.max.u64") == 16
    assert ptx.count("fence.sc.sys") == 16


def test_sixteen_chains_on_an_ionic_queue_one_reservation_and_one_doorbell_with_the_passes():
    # Experimental (generated for NVIDIA GPUs, not run on a device): RC is in order, so the 32
    # WQEs (16 writes, 16 fetch-adds) share one reservation, one publication and one doorbell.
    ptx = ptx_of("ionic", passes_off=False)
    assert count(ptx, "atom.relaxed.gpu.global.add.u64") == 1
    assert count(ptx, "st.mmio.relaxed.sys.global.b64") == 1
    # The shared queue's publication fence, and the doorbell's (the MMIO store must follow the
    # WQEs of earlier producers too, which the publication's acquire only made visible here).
    assert count(ptx, "fence.sc.sys") == 2
    library = ptx_of("ionic", passes_off=True)
    assert count(library, "st.mmio.relaxed.sys.global.b64") == 16
    assert count(library, "fence.sc.sys") >= 16


def test_sixteen_chains_over_nvlink_are_sixteen_release_flag_stores_and_no_fences():
    ptx = ptx_of("p2p", passes_off=False)
    assert count(ptx, "st.release.sys.global.u64") == 16
    assert ptx.count("fence.sc.sys") == 1  # the drain's; the signals need none
    library = ptx_of("p2p", passes_off=True)
    assert library.count("st.volatile.global.u64") == 16 and library.count("fence.sc.sys") >= 16


def gemm_ttgir(guarded: bool) -> str:
    from triton.compiler import ASTSource
    import triton
    from helpers import TARGET
    aboleth.install(target="p2p")
    try:
        kernel = triton.compile(ASTSource(ptx_kernels.gemm_after_waits, ptx_kernels.GEMM_SIGNATURE,
                                          {"K": 512, "GUARDED": guarded}, attrs=ptx_kernels.GEMM_ATTRIBUTES),
                                target=TARGET, options={"num_stages": 3})
    finally:
        aboleth.uninstall()
    return kernel.asm["ttgir"]


def test_the_pipeliner_prefetches_the_unguarded_loop():
    # The control: with num_stages=3 Triton issues the tiles' loads as async copies ahead.
    assert gemm_ttgir(guarded=False).count("ttg.async_copy_global_to_local") > 0


def test_no_async_copy_of_data_guarded_by_a_wait_is_issued_above_the_wait():
    ttgir = gemm_ttgir(guarded=True)
    assert "ttg.async_copy_global_to_local" not in ttgir
    lines = ttgir.splitlines()
    poll = next(index for index, line in enumerate(lines) if "ld.acquire.sys.global.u64" in line)
    loads = [index for index, line in enumerate(lines)
             if "tt.load" in line and ("tensor<64x32" in line or "tensor<32x64" in line)]
    assert loads and all(index > poll for index in loads)


def test_sixteen_chains_on_an_mlx5_queue_one_doorbell_with_the_passes_sixteen_without():
    ptx = ptx_of("mlx5", passes_off=False)
    assert ptx.count("st.mmio.relaxed.sys.global.b64") == 1
    assert ptx.count("st.release.sys.global.b32") == 1  # the doorbell record
    library = ptx_of("mlx5", passes_off=True)
    assert library.count("st.mmio.relaxed.sys.global.b64") == 16
    assert library.count("st.release.sys.global.b32") == 16


def stream_loop_ptx(target: str, trips: int, **config) -> str:
    aboleth.install(target=target, **config)
    try:
        kernel = compile_kernel(ptx_kernels.stream_loop, ptx_kernels.STREAM_LOOP_SIGNATURE,
                                {"CHUNK": 64, "N": trips, "RANK": 0})
    finally:
        aboleth.uninstall()
    assert kernel.asm["cubin"]
    return kernel.asm["ptx"]


def test_a_loop_of_sixteen_chains_is_posted_by_a_warp_then_one_doorbell():
    for target in ("proxy", "mlx5"):
        ptx = stream_loop_ptx(target, 16)
        # Each thread of the leader's warp runs its own iterations: the loop starts at %tid.x,
        # strides by 32, writes its commands unpredicated, and a warp barrier precedes the doorbell.
        assert ptx.count("bar.warp.sync") == 1, target
        # The put's and the signal's command writes run in every thread that runs the iteration.
        assert ptx.count("setp.eq.u32 %ab_leader, %ab_tid, %ab_tid") >= 2, target
        thread_scope = stream_loop_ptx(target, 16, disabled_passes=["choose-doorbell-scope"])
        assert thread_scope.count("bar.warp.sync") == 0, target
        assert "setp.eq.u32 %ab_leader, %ab_tid, %ab_tid" not in thread_scope, target
        doorbell = "st.mmio.relaxed.sys.global.b64" if target == "mlx5" else "st.release.sys.global.u64"
        assert count(ptx, doorbell) == count(thread_scope, doorbell) == 1, target


def test_a_loop_of_sixty_four_chains_is_posted_by_the_whole_program():
    ptx = stream_loop_ptx("proxy", 64)
    assert "%ntid.x" in ptx  # the stride is the program's size
    assert ptx.count("bar.warp.sync") == 0
    assert "%ntid.x" not in stream_loop_ptx("proxy", 64, disabled_passes=["choose-doorbell-scope"])


def count_arrivals_compiled(immediate_signals: bool):
    aboleth.install(target="mlx5", immediate_signals=immediate_signals)
    try:
        kernel = compile_kernel(ptx_kernels.count_arrivals, ptx_kernels.COUNT_ARRIVALS_SIGNATURE,
                                {"CHUNK": 64, "RANK": 0})
    finally:
        aboleth.uninstall()
    assert kernel.asm["cubin"]
    summary = kernel.metadata.aboleth
    summary = json.loads(summary) if isinstance(summary, str) else summary
    return kernel.asm["ptx"], summary["counts"]


def count_arrivals_ptx(immediate_signals: bool) -> str:
    return count_arrivals_compiled(immediate_signals)[0]


def test_write_with_immediate_signals_ride_on_their_puts_and_the_wait_drains_receives():
    ptx = count_arrivals_ptx(immediate_signals=True)
    # The signal's atomic WQE is gone (no masked fetch-add/compare-swap opcode bytes are
    # built): the wait drains the receive CQ under its poll lock and applies the immediate.
    assert "atom.acquire.gpu.global.cas.b32" in ptx  # the receive CQ's poll lock
    assert "red.release.sys.global.add.u64" in ptx  # an `add` immediate applied to its flag
    plain = count_arrivals_ptx(immediate_signals=False)
    assert "atom.acquire.gpu.global.cas.b32" not in plain
    assert "red.release.sys.global.add.u64" not in plain
    # Four puts and four signals: eight WQEs, or four writes with immediate.
    assert count_arrivals_compiled(False)[1]["wqes"] == 8
    assert count_arrivals_compiled(True)[1]["wqes"] == 4


def chains_and_waits_ptx(packet_signals: bool, chunk: int = 64) -> str:
    aboleth.install(target="p2p", packet_signals=packet_signals)
    try:
        kernel = compile_kernel(ptx_kernels.chains_and_waits, ptx_kernels.CHAINS_AND_WAITS_SIGNATURE,
                                {"CHUNK": chunk, "RANK": 0, "RANKS": 2})
    finally:
        aboleth.uninstall()
    assert kernel.asm["cubin"]  # ptxas accepted it
    return kernel.asm["ptx"]


def test_packet_signals_travel_in_their_puts_and_the_waits_unpack_them():
    ptx = chains_and_waits_ptx(packet_signals=True)
    # Each chain: its payload as packet halves (one predicated relaxed store per lane of each
    # thread) and the header; no barrier and no release flag store on the sending side.
    assert count(ptx, "@%ab_p st.relaxed.sys.global.u64") == 4
    assert "bar.sync" not in ptx
    # Each wait: thread 0 reads its flag's slot (2 header packets and the 8 packets of a 64-byte
    # chunk, 16-byte loads issued back to back) and, once a whole transfer landed, copies it
    # from registers, releases the flag and marks the slot consumed: one release store per wait.
    assert count(ptx, "ld.relaxed.sys.global.v2.u64") == 4 * (2 + 8)
    assert count(ptx, "st.release.sys.global.u64") == 4
    plain = chains_and_waits_ptx(packet_signals=False)
    assert count(plain, "@%ab_p st.relaxed.sys.global.u64") == 0
    assert count(plain, "st.release.sys.global.u64") == 4  # the four release flag stores


def test_the_largest_packet_puts_are_unpacked_in_groups_and_reloaded():
    # 512-byte chunks: 64 packets per transfer, checked in 4 groups of 16, then loaded again to copy.
    ptx = chains_and_waits_ptx(packet_signals=True, chunk=512)
    assert count(ptx, "ld.relaxed.sys.global.v2.u64") == 4 * (2 + 64 + 64)
    assert count(ptx, "st.release.sys.global.u64") == 4
