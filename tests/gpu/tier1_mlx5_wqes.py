"""The mlx5 device library on the GPU, without a NIC: what its generated C++ writes, decoded.

No machine here has an RDMA NIC, so nothing executes these WQEs (that is the software NIC's job,
issue 17). What can be checked on a GPU is everything the GPU does: this script builds the
mlx5 tier-1 library (header only), compiles ``tests/gpu/tier1/mlx5_wqes.cu`` against it, and
launches its kernels (put, put_signal set, signal add, then quiet; for a thread, a warp and a
block) against an mlx5 endpoint made of device memory standing in for a NIC: a 64-block send
ring, a collapsed CQ, a doorbell record, an 8-byte "UAR", a queue management block and a
wait-failure log, described by an ``EndpointHandle`` built with ``_aboleth.layout_bytes``.
Then, on the host, with ``aboleth-abi``'s own decoders (``_aboleth.decode_mlx5_wqe_in_ring``,
``_aboleth.layout_fields``):

1. ``posting`` (per scope): the CQE is pre-set to report the last WQE complete, so quiet
   returns. The ring must hold RDMA_WRITE (slot 0), RDMA_WRITE (1), the 8-byte masked
   compare-and-swap of the set (2-3) and ATOMIC_FA of the add (4), each with the call's remote
   address and rkey, source address, lkey and length, the signal value, the QPN and its slot as
   wqe_index; the doorbell record's send counter 5, the UAR store {5 << 8, qpn << 8}, and the
   management block's counters at 5 with the post lock free.
2. ``bounded``: the same posts with the CQE left invalid (a NIC that never completes): quiet
   must give up after the log's bound, and its record must name the completion wait (kind,
   site, peer, the WQE it waited for).
3. ``mutation``: the library built with ``mutation="host-order-wqes"`` (WQE fields in the
   GPU's byte order) must fail step 1's check, and the real library pass it.

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
        python3 tests/gpu/tier1_mlx5_wqes.py OUT_DIR

Writes OUT_DIR/tier1_mlx5_wqes.json; exit status 0 when every step passed. One process, one GPU.
"""

from __future__ import annotations

import ctypes
import datetime
import json
import os
import sys
import time
import traceback
from typing import Any, Dict, List

import torch

from aboleth import _aboleth, device_library

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from tier1_exchange import Driver, run, wait_for  # noqa: E402

SOURCE = os.path.join(HERE, "tier1", "mlx5_wqes.cu")
ARCH = os.environ.get("TIER1_ARCH", "sm_90")
RING_BLOCKS = 64
QPN = 0x1234
BYTES = 256
VALUE = 7
DST_BASE, DST_RKEY, DST_OFFSET = 0x7000_0000_0000, 0x4242, 4096
FLAG_BASE, FLAG_RKEY, FLAG_OFFSET = 0x7100_0000_0000, 0x4343, 8
SOURCE_LKEY, SOURCE_OFFSET = 0x99, 128
RESULT_LKEY = 0x77
TIMEOUT_NS = 200_000_000
LOG_RECORDS = 4
SCOPES = {"thread": 1, "warp": 32, "block": 128}
CQE_BYTES, WQE_COUNTER_OFFSET, OP_OWN_OFFSET = 64, 60, 63
LAST_WQE_SLOT = 4


def transport_code(name: str) -> int:
    names = [entry[0] for entry in _aboleth.transports()]
    # The wire code is the position in aboleth_abi::Transport::ALL plus one (mlx5 = 1).
    return names.index(name) + 1


class FakeNic:
    """Device memory standing in for one mlx5 queue pair to peer 1, and the tables naming it."""

    def __init__(self, cqe_completes: bool) -> None:
        def zeros(nbytes: int) -> Any:
            return torch.zeros(nbytes, dtype=torch.uint8, device="cuda")
        self.ring, self.cq, self.management = zeros(64 * RING_BLOCKS), zeros(CQE_BYTES), zeros(64)
        self.doorbell_record, self.uar, self.result = zeros(8), zeros(8), zeros(8)
        self.log = zeros(64 + 64 * LOG_RECORDS)
        self.source = zeros(4096)
        cqe = torch.zeros(CQE_BYTES, dtype=torch.uint8)
        if cqe_completes:
            # A requester CQE (opcode 0) reporting the WQE at LAST_WQE_SLOT: everything complete.
            cqe[WQE_COUNTER_OFFSET:WQE_COUNTER_OFFSET + 2] = torch.tensor(
                list(LAST_WQE_SLOT.to_bytes(2, "big")), dtype=torch.uint8)
            cqe[OP_OWN_OFFSET] = 0x00
        else:
            cqe[OP_OWN_OFFSET] = 0xF0  # no CQE yet
        self.cq.copy_(cqe)
        self.log.copy_(self.host(_aboleth.layout_bytes("WaitFailureLogHeader", {
            "capacity_records": LOG_RECORDS, "timeout_nanoseconds": TIMEOUT_NS}), len(self.log)))
        own = _aboleth.layout_bytes("EndpointHandle", {
            "transport": transport_code("p2p"), "peer_rank": 0, "local_rank": 0,
            "wait_failure_log_address": self.log.data_ptr()})
        peer = _aboleth.layout_bytes("EndpointHandle", {
            "transport": transport_code("mlx5"), "peer_rank": 1, "local_rank": 0,
            "sq_buffer_address": self.ring.data_ptr(), "sq_wqe_basic_block_count": RING_BLOCKS, "qpn": QPN,
            "doorbell_record_address": self.doorbell_record.data_ptr(),
            "uar_doorbell_address": self.uar.data_ptr(), "cq_buffer_address": self.cq.data_ptr(),
            "cqe_count": 1, "cq_collapsed": 1, "management_address": self.management.data_ptr(),
            "atomic_result_address": self.result.data_ptr(), "atomic_result_lkey": RESULT_LKEY,
            "wait_failure_log_address": self.log.data_ptr()})
        self.handles = self.device(own + peer)

        def descriptors(base: int, rkey: int) -> Any:
            empty = _aboleth.layout_bytes("RemoteRegionDescriptor", {})
            region = _aboleth.layout_bytes("RemoteRegionDescriptor", {
                "base_address": base, "length_bytes": 1 << 20, "rkey": rkey, "peer_rank": 1,
                "transport": transport_code("mlx5")})
            return self.device(empty + region)
        self.dst_table, self.flag_table = descriptors(DST_BASE, DST_RKEY), descriptors(FLAG_BASE, FLAG_RKEY)

    @staticmethod
    def host(data: bytes, length: int) -> Any:
        padded = data + bytes(length - len(data))
        return torch.frombuffer(bytearray(padded), dtype=torch.uint8)

    def device(self, data: bytes) -> Any:
        return self.host(data, len(data)).cuda()

    def arguments(self, waits_only: bool) -> List[Any]:
        context = _aboleth.device_context_bytes(self.handles.data_ptr(), 0, 2)
        dst = _aboleth.remote_region_bytes(self.dst_table.data_ptr(), DST_OFFSET)
        src = _aboleth.local_region_bytes(self.source.data_ptr() + SOURCE_OFFSET, SOURCE_LKEY)
        flag = _aboleth.remote_region_bytes(self.flag_table.data_ptr(), FLAG_OFFSET)
        return [ctypes.create_string_buffer(context, len(context)), ctypes.c_int(1),
                ctypes.create_string_buffer(dst, len(dst)), ctypes.create_string_buffer(src, len(src)),
                ctypes.c_uint64(BYTES), ctypes.create_string_buffer(flag, len(flag)), ctypes.c_uint64(VALUE),
                ctypes.c_int(1 if waits_only else 0)]

    def bytes_of(self, tensor: Any) -> bytes:
        return bytes(tensor.cpu().numpy().tobytes())


class Kernels:
    def __init__(self, driver: Driver, cubin: bytes) -> None:
        self.driver = driver
        self.module = ctypes.c_void_p()
        driver.check(driver.cuModuleLoadData(ctypes.byref(self.module), cubin), "cuModuleLoadData")

    def launch(self, scope: str, arguments: List[Any]) -> None:
        function = ctypes.c_void_p()
        self.driver.check(self.driver.cuModuleGetFunction(ctypes.byref(function), self.module,
                                                          f"post_{scope}".encode()), f"post_{scope}")
        pointers = (ctypes.c_void_p * len(arguments))(*[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p)
                                                         for a in arguments])
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self.driver.check(self.driver.cuLaunchKernel(function, 1, 1, 1, SCOPES[scope], 1, 1, 0, stream, pointers,
                                                     None), "cuLaunchKernel")
        event = torch.cuda.Event()
        event.record()
        wait_for(event, f"post_{scope}", deadline_s=30.0)


def expect(what: str, seen: Any, wanted: Any, problems: List[str]) -> None:
    if seen != wanted:
        problems.append(f"{what}: {seen!r}, expected {wanted!r}")


def check_posts(nic: FakeNic, completed: bool) -> Dict[str, Any]:
    """The WQEs, doorbell record, UAR and management block after put, put_signal, signal."""
    problems: List[str] = []
    ring = nic.bytes_of(nic.ring)
    source = nic.source.data_ptr() + SOURCE_OFFSET
    wqes = {}
    for slot, operation in [(0, "RdmaWrite"), (1, "RdmaWrite"), (2, "MaskedCompareSwap64"), (4, "AtomicFetchAdd")]:
        try:
            name, fields = _aboleth.decode_mlx5_wqe_in_ring(ring, RING_BLOCKS, slot)
        except ValueError as error:
            problems.append(f"slot {slot}: {error}")
            continue
        wqes[slot] = {"operation": name, **fields}
        expect(f"slot {slot} operation", name, operation, problems)
        expect(f"slot {slot} wqe_index", fields["wqe_index"], slot, problems)
        expect(f"slot {slot} qpn", fields["qpn"], QPN, problems)
        if operation == "RdmaWrite":
            wanted = {"remote_address": DST_BASE + DST_OFFSET, "rkey": DST_RKEY, "local_address": source,
                      "lkey": SOURCE_LKEY, "length_bytes": BYTES}
        else:
            wanted = {"remote_address": FLAG_BASE + FLAG_OFFSET, "rkey": FLAG_RKEY,
                      "local_address": nic.result.data_ptr(), "lkey": RESULT_LKEY, "length_bytes": 8}
            wanted.update({"swap": VALUE, "compare": 0, "swap_mask": (1 << 64) - 1, "compare_mask": 0}
                          if operation == "MaskedCompareSwap64" else {"add": VALUE})
        for key, value in wanted.items():
            expect(f"slot {slot} {key}", fields.get(key), value, problems)
    # Slot 0 starts a quarter of the ring: it asks for a completion (the reclaim point).
    if 0 in wqes:
        expect("slot 0 asks for a CQE", wqes[0]["fm_ce_se"] & 0x08, 0x08, problems)
    record = _aboleth.layout_fields("Mlx5DoorbellRecord", nic.bytes_of(nic.doorbell_record))
    expect("doorbell record send counter", record["send_counter"], LAST_WQE_SLOT + 1, problems)
    uar = _aboleth.layout_fields("Mlx5UarDoorbell", nic.bytes_of(nic.uar))
    expect("UAR producer index word", uar["opmod_idx_opcode"], (LAST_WQE_SLOT + 1) << 8, problems)
    expect("UAR qpn word", uar["qpn_ds"], QPN << 8, problems)
    management = _aboleth.layout_fields("Mlx5QueueManagement", nic.bytes_of(nic.management))
    for counter in ("reserved_head", "ready_head", "producer_index"):
        expect(counter, management[counter], LAST_WQE_SLOT + 1, problems)
    expect("consumer_index", management["consumer_index"], LAST_WQE_SLOT + 1 if completed else 0, problems)
    expect("post_send_lock", management["post_send_lock"], 0, problems)
    return {"passed": not problems, "problems": problems, "wqes": wqes, "doorbell_record": record, "uar": uar,
            "management": management}


def log_state(nic: FakeNic) -> Dict[str, Any]:
    data = nic.bytes_of(nic.log)
    header = _aboleth.layout_fields("WaitFailureLogHeader", data[:64])
    records = [_aboleth.layout_fields("WaitFailureRecord", data[64 + 64 * i:128 + 64 * i])
               for i in range(min(header["failure_counter"], LOG_RECORDS))]
    return {"header": header, "records": records}


def build(nvcc: str, work: str, mutation: Any = None) -> Any:
    directory = os.path.join(work, "library" if mutation is None else f"library-{mutation}")
    library = device_library.build("mlx5", directory, archive=False, mutation=mutation)
    cubin = os.path.join(work, f"mlx5_wqes{'' if mutation is None else '-' + mutation}.cubin")
    run([nvcc, f"-arch={ARCH}", "-std=c++17", "-I", str(library.include_dir), "-cubin", SOURCE, "-o", cubin])
    with open(cubin, "rb") as handle:
        return library, handle.read()


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "/tmp/aboleth-gpu"
    os.makedirs(out_dir, exist_ok=True)
    report: Dict[str, Any] = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                              "device": torch.cuda.get_device_name(), "machine": os.environ.get("MACHINE"),
                              "commit": os.environ.get("GIT_COMMIT"), "command": " ".join(sys.argv),
                              "what": "the mlx5 tier-1 library's WQEs, doorbell record, UAR store and bounded "
                                      "quiet on one GPU, decoded by aboleth-abi; no NIC executes them",
                              "steps": {}}
    passed = True
    try:
        torch.cuda.init()
        torch.zeros(1, device="cuda")
        nvcc = device_library.find_nvcc()
        if nvcc is None:
            raise RuntimeError("no nvcc on this machine")
        work = os.path.join(out_dir, "tier1-mlx5-build")
        os.makedirs(work, exist_ok=True)
        driver = Driver()
        library, cubin = build(nvcc, work)
        kernels = Kernels(driver, cubin)
        posting = {}
        for scope in SCOPES:
            nic = FakeNic(cqe_completes=True)
            kernels.launch(scope, nic.arguments(waits_only=False))
            posting[scope] = check_posts(nic, completed=True)
            posting[scope]["log"] = log_state(nic)
            if posting[scope]["log"]["header"]["failure_counter"] != 0:
                posting[scope]["passed"] = False
                posting[scope]["problems"].append("a wait gave up")
        report["steps"]["posting"] = {"passed": all(s["passed"] for s in posting.values()), "scopes": posting}

        nic = FakeNic(cqe_completes=False)
        started = time.monotonic()
        kernels.launch("thread", nic.arguments(waits_only=False))
        elapsed = time.monotonic() - started
        bounded = check_posts(nic, completed=False)
        log = log_state(nic)
        quiet_sites = {site for site, variant, _ in library.wait_sites if variant == "quiet_thread"}
        problems = bounded["problems"]
        if not log["records"]:
            problems.append("quiet did not give up")
        else:
            record = log["records"][0]
            expect("record kind", record["comparison"], 2, problems)  # WAIT_KIND_COMPLETION
            expect("record site is quiet's", record["site_id"] in quiet_sites, True, problems)
            expect("record peer", record["peer_rank"], 1, problems)
            expect("record expected WQE", record["expected_value"], LAST_WQE_SLOT, problems)
            expect("record address", record["flag_address"], nic.cq.data_ptr() + WQE_COUNTER_OFFSET, problems)
        report["steps"]["bounded"] = {"passed": not problems, "problems": problems, "log": log,
                                      "seconds": round(elapsed, 3), "timeout_ns": TIMEOUT_NS}

        mutated_library, mutated_cubin = build(nvcc, work, "host-order-wqes")
        mutated = Kernels(driver, mutated_cubin)
        nic = FakeNic(cqe_completes=True)
        mutated.launch("thread", nic.arguments(waits_only=False))
        caught = check_posts(nic, completed=True)
        report["steps"]["mutation"] = {"passed": not caught["passed"] and posting["thread"]["passed"],
                                       "mutation": "host-order-wqes", "caught_problems": caught["problems"][:8]}
        passed = all(step["passed"] for step in report["steps"].values())
    except Exception:
        report["error"] = traceback.format_exc()
        passed = False
    report["passed"] = passed
    with open(os.path.join(out_dir, "tier1_mlx5_wqes.json"), "w") as handle:
        json.dump(report, handle, indent=2, default=str)
    print(json.dumps({name: step["passed"] for name, step in report["steps"].items()}), "passed" if passed else
          "FAILED", report.get("error", ""))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
