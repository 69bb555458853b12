"""The export forms of the seed's tier-2 all-to-all on the GPU (``aboleth compile --export``), each
launched the way its consumer would and checked bit-exact over ROUNDS rounds.

Run one process per GPU, or two ranks on one GPU under CUDA MPS (tests/gpu/run_export_forms.sh):

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 ABOLETH_TRANSPORT=p2p \\
        torchrun --nproc-per-node 2 tests/gpu/export_forms.py OUT_DIR

Every rank connects with ABOLETH_TRANSPORT, registers the seed's buffer (send | recv | flags, 256 B
per peer) and exports examples/triton/alltoall.py (BYTES=256, RANK=its rank) on this machine with
``python -m aboleth compile ... --export FORM``. Steps, each ROUNDS rounds of the seed's check
(tests/gpu/seed_alltoall.py: fresh payloads, receive slices poisoned, every peer's slice bit-exact,
flags = epoch):

1. ``kernel``: the C launcher (``alltoall_launcher.c``, the cubin embedded) built into a shared
   library with gcc and libcuda, called through ctypes on torch's stream.
2. ``fragment``: the fragment spliced into python/tests/export_kernels.py's ``scale_then_exchange``
   (y = 2 x, then the stub the fragment replaces), compiled by Triton from the spliced .ttir and
   launched; y is checked too.
3. ``function``: python/tests/export_kernels.py's ``call_alltoall_function``, a stock Triton kernel
   that links ``alltoall_function.ll`` through extern_libs (no aboleth stage).
4. ``comparison_gt``: the seed's all-to-all (tier 2) waiting with ``comparison="gt"`` for
   ``epoch - 1`` (what the previous round left does not satisfy it).

Each rank writes OUT_DIR/export_forms-rank{R}.json. Exit status 0 when every step passed.
"""

from __future__ import annotations

import ctypes
import datetime
import json
import os
import subprocess
import sys
import time
import traceback
from typing import Any, Dict

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "python", "tests"))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import aboleth  # noqa: E402
import aboleth.language as aboleth_language  # noqa: E402
import export_kernels  # noqa: E402
from aboleth import export  # noqa: E402
from aboleth.triton_compile import _capture_ttir  # noqa: E402
from seed_alltoall import TRANSPORT, Buffers, run_rounds  # noqa: E402

ROUNDS = int(os.environ.get("EXPORT_ROUNDS", "200"))
BYTES = 256


def export_seed(form: str, rank: int, out: str) -> None:
    command = [sys.executable, "-m", "aboleth", "compile", os.path.join(REPO, "examples", "triton", "alltoall.py"),
               "--kernel", "alltoall", "--target", TRANSPORT, "--signature", export_kernels.SEED_SIGNATURE,
               "--constexpr", f"BYTES={BYTES}", "--constexpr", f"RANK={rank}", "--export", form, "--out", out]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {result.stderr}")


class KernelForm(Buffers):
    """Launches through the exported C launcher."""

    def attach(self, work: str) -> "KernelForm":
        library = os.path.join(work, "liballtoall_launcher.so")
        from aboleth.device_library import find_nvcc

        nvcc_include = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(find_nvcc()))), "include")
        include = [flag for path in (nvcc_include, "/usr/local/cuda/include") if os.path.isdir(path)
                   for flag in ("-I", path)]
        subprocess.run(["gcc", "-shared", "-fPIC", "-O2", *include, os.path.join(work, "alltoall_launcher.c"),
                        "-o", library, "-lcuda"], check=True)
        self.launcher = ctypes.CDLL(library)
        self.launcher.alltoall_launch.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                                                  ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int64,
                                                  ctypes.c_int32, ctypes.c_uint64, ctypes.c_int64]
        result = self.launcher.alltoall_load()
        if result != 0:
            raise RuntimeError(f"alltoall_load() returned CUresult {result}")
        return self

    def launch(self, epoch: int, bytes_per_peer: int) -> None:
        stream = torch.cuda.current_stream().cuda_stream
        result = self.launcher.alltoall_launch(
            stream, self.n - 1, 1, 1, self.table.endpoint_handles.data_ptr(), self.table.regions("recv").data_ptr(),
            self.table.regions("flags").data_ptr(), self.local_send.address, self.local_send.lkey,
            self.my_flags.data_ptr(), epoch)
        if result != 0:
            raise RuntimeError(f"alltoall_launch() returned CUresult {result}")


class FragmentForm(Buffers):
    """Launches the host kernel with the fragment spliced in; checks its compute too."""

    def attach(self, work: str) -> "FragmentForm":
        fragment = open(os.path.join(work, "alltoall.fragment.ttir")).read()
        host = _capture_ttir(export_kernels.scale_then_exchange, dict(export_kernels.HOST_SIGNATURE),
                             {"BLOCK": 256}, {})
        path = os.path.join(work, "spliced.ttir")
        with open(path, "w") as file:
            file.write(export.splice_fragment(host, fragment, "communication"))
        self.kernel = triton.compile(path)
        self.x = torch.randn(200, device="cuda")
        self.y = torch.zeros_like(self.x)
        self.compute_errors = 0
        return self

    def launch(self, epoch: int, bytes_per_peer: int) -> None:
        self.y.zero_()
        self.kernel[(self.n - 1, 1, 1)](self.x, self.y, self.x.numel(), self.table.endpoint_handles.view(torch.int64),
                                        self.table.regions("recv"), self.table.regions("flags"),
                                        self.local_send.address, self.local_send.lkey, self.my_flags, epoch)

    def check(self, round_seed: int, bytes_per_peer: int, epoch: int, poison: int) -> list:
        errors = super().check(round_seed, bytes_per_peer, epoch, poison)
        if not torch.equal(self.y, self.x * 2):
            errors.append("the host kernel's compute (y = 2 x) is wrong")
        return errors


class FunctionForm(Buffers):
    """Launches a stock Triton kernel that calls the exported device function."""

    def attach(self, work: str) -> "FunctionForm":
        self.path = os.path.join(work, "alltoall_function.ll")
        export_kernels.FUNCTION_PATH["path"] = self.path
        return self

    def launch(self, epoch: int, bytes_per_peer: int) -> None:
        export_kernels.call_alltoall_function[(self.n - 1,)](
            self.table.endpoint_handles.view(torch.int64), self.table.regions("recv"), self.table.regions("flags"),
            self.local_send.address, self.local_send.lkey, self.my_flags, epoch, num_warps=4,
            extern_libs={"alltoall_function": self.path})


@triton.jit
def alltoall_wait_gt(endpoints, recv, flags, send, send_key, my_flags, epoch,
                     BYTES: tl.constexpr, RANK: tl.constexpr):
    # The seed's all-to-all, waiting for `flag > epoch - 1` instead of `flag >= epoch`.
    pid = tl.program_id(0)
    peer = pid + (pid >= RANK).to(tl.int32)
    ep = aboleth_language.endpoint(endpoints, peer)
    dst = aboleth_language.remote(recv, peer)
    flag = aboleth_language.remote(flags, peer, tl.int64)
    src = send.to(tl.pointer_type(tl.int8)) + peer * BYTES
    t = aboleth_language.put(ep, dst.at(RANK * BYTES), src, BYTES, source_key=send_key)
    s = aboleth_language.signal(ep, flag.at(RANK), epoch, after=t)
    aboleth_language.wait_signal(my_flags + peer, epoch - 1, comparison="gt")
    aboleth_language.wait(s)


class ComparisonForm(Buffers):
    """The tier-2 all-to-all whose waits compare with `>`, compiled under world.compilation()."""

    def attach(self, work: str) -> "ComparisonForm":
        return self

    def launch(self, epoch: int, bytes_per_peer: int) -> None:
        with self.world.compilation():
            alltoall_wait_gt[(self.n - 1,)](self.table.endpoint_handles.view(torch.int64),
                                            self.table.regions("recv"), self.table.regions("flags"),
                                            self.local_send.address, self.local_send.lkey, self.my_flags, epoch,
                                            BYTES=bytes_per_peer, RANK=self.world.rank)


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", "/tmp")
    local_rank, rank = int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"])
    torch.cuda.set_device(local_rank % torch.cuda.device_count())
    report: Dict[str, Any] = {
        "rank": rank, "transport": TRANSPORT, "device": torch.cuda.get_device_name(torch.cuda.current_device()),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__, "triton": triton.__version__, "aboleth": aboleth.__version__,
        "rounds_per_form": ROUNDS, "bytes_per_peer": BYTES, "steps": {}, "passed": False,
    }
    path = os.path.join(out_dir, f"export_forms-rank{rank}.json")

    def save() -> None:
        with open(path, "w") as file:
            json.dump(report, file, indent=1)

    boot = aboleth.TcpStoreBootstrap.from_env()
    world = aboleth.World(boot.rank, boot.world_size, device=torch.cuda.current_device(), bootstrap=boot)
    world.connect_all(TRANSPORT)
    n = boot.world_size
    base = Buffers.register(world, n, BYTES)
    epoch = 1
    step = "setup"
    try:
        for step, form_class in (("kernel", KernelForm), ("fragment", FragmentForm), ("function", FunctionForm),
                                 ("comparison_gt", ComparisonForm)):
            started = time.monotonic()
            work = os.path.join(out_dir, f"work-rank{rank}", step)
            if step != "comparison_gt":
                export_seed(step, rank, work)
            buffers = form_class(world, base.table, base.buf, n, BYTES).attach(work)
            rounds = run_rounds(buffers, first_epoch=epoch, count=ROUNDS, bytes_per_peer=BYTES,
                                seed_base=50_000 + 10_000 * len(report["steps"]))
            epoch = rounds["next_epoch"]
            rounds["seconds"] = round(time.monotonic() - started, 3)
            report["steps"][step] = {"passed": rounds["failed_rounds"] == 0, **rounds}
            save()
            world.barrier()
        report["passed"] = all(entry["passed"] for entry in report["steps"].values())
    except Exception:
        report["steps"][step] = {"passed": False, "error": traceback.format_exc()[-3000:]}
        report["passed"] = False
    save()
    print(f"rank {rank}: export forms {'passed' if report['passed'] else 'FAILED'}: "
          + ", ".join(f"{name} {'ok' if entry['passed'] else 'FAILED'}" for name, entry in report["steps"].items()))
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
