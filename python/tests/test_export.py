"""`aboleth compile KERNEL.py --export fragment|kernel|function` without a GPU: each form of the
seed's all-to-all is written and used the way its consumer would (the GPU run is
tests/gpu/export_forms.py):

- fragment: spliced into a host kernel's TTIR in place of a noinline stub, and the spliced module
  compiled by Triton from the .ttir file (the host's compute and the generated communication are
  both in the PTX);
- kernel: the C launcher compiles with -Wall -Werror against the driver API's header, the cubin is
  an ELF holding the entry, the JSON describes the launch;
- function: a stock Triton kernel links the LLVM IR through extern_libs, and a CUDA kernel
  calling it through the header device-links with the PTX (nvcc -rdc).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import triton
from triton.backends.compiler import GPUTarget

import export_kernels
from aboleth import export
from aboleth.triton_compile import _capture_ttir

REPO_ROOT = Path(__file__).resolve().parents[2]
SEED = str(REPO_ROOT / "examples" / "triton" / "alltoall.py")
TARGET = GPUTarget("cuda", 90, 32)


def export_seed(form: str, out: Path, target: str = "p2p") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aboleth", "compile", SEED, "--kernel", "alltoall", "--target", target,
                           "--signature", export_kernels.SEED_SIGNATURE, "--constexpr", "BYTES=256",
                           "--constexpr", "RANK=1", "--export", form, "--out", str(out)],
                          capture_output=True, text=True, cwd=REPO_ROOT)


def nvcc_or_skip() -> str:
    from aboleth.device_library import find_nvcc

    try:
        return find_nvcc()
    except FileNotFoundError:
        if os.environ.get("CI"):
            pytest.fail("CI must have nvcc (make cuda-setup)")
        pytest.skip("no nvcc here (make cuda-setup installs it)")


@pytest.mark.parametrize("target", ["p2p", "proxy"])
def test_the_fragment_splices_into_a_host_kernel_and_compiles(tmp_path: Path, target: str) -> None:
    result = export_seed("fragment", tmp_path, target)
    assert result.returncode == 0, result.stderr
    fragment = (tmp_path / "alltoall.fragment.ttir").read_text()
    # Lowered (no aboleth calls left) and without locations, so it splices into any module.
    assert "tt.func private @alltoall_fragment(" in fragment and "loc(" not in fragment
    assert "__aboleth_v1__" not in fragment
    host = _capture_ttir(export_kernels.scale_then_exchange, dict(export_kernels.HOST_SIGNATURE), {"BLOCK": 256}, {})
    spliced = export.splice_fragment(host, fragment, "communication")
    path = tmp_path / "spliced.ttir"
    path.write_text(spliced)
    compiled = triton.compile(str(path), target=TARGET)
    ptx = compiled.asm["ptx"]
    assert compiled.metadata.name == "scale_then_exchange"
    assert "mul.f32" in ptx or "add.f32" in ptx  # the host's compute
    assert "ld.acquire.sys.global.u64" in ptx and "%globaltimer" in ptx  # the spliced wait
    if target == "p2p":
        assert "st.release.sys.global.u64" in ptx  # the spliced signal
    else:
        assert "atom.release.sys.global.max.u64" in ptx or "st.release.sys.global.u64" in ptx


def test_a_stub_with_other_parameters_is_refused_with_both_signatures(tmp_path: Path) -> None:
    assert export_seed("fragment", tmp_path).returncode == 0
    fragment = (tmp_path / "alltoall.fragment.ttir").read_text()
    host = _capture_ttir(export_kernels.scale_then_exchange, dict(export_kernels.HOST_SIGNATURE), {"BLOCK": 256}, {})
    broken = fragment.replace("%arg6: i64", "%arg6: i32")
    with pytest.raises(export.ExportError, match=r"takes \(!tt.ptr<i64>, .*i64\) but the fragment takes .*i32\)"):
        export.splice_fragment(host, broken, "communication")
    with pytest.raises(export.ExportError, match="0 private functions of the host module are named like `nothing`"):
        export.splice_fragment(host, fragment, "nothing")
    returning = export._without_locations(host).replace(") attributes {noinline = true}",
                                                        ") -> i32 attributes {noinline = true}", 1)
    assert returning != export._without_locations(host)
    with pytest.raises(export.ExportError, match="returns a value; a fragment returns nothing"):
        export.splice_fragment(returning, fragment, "communication")


def test_the_standalone_kernel_has_its_cubin_description_and_launcher(tmp_path: Path) -> None:
    result = export_seed("kernel", tmp_path)
    assert result.returncode == 0, result.stderr
    assert "wrote the kernel form of alltoall (p2p)" in result.stdout
    cubin = (tmp_path / "alltoall.cubin").read_bytes()
    assert cubin[:4] == b"\x7fELF" and b"alltoall" in cubin
    description = json.loads((tmp_path / "alltoall.json").read_text())
    assert description["entry"] == "alltoall" and description["threads_per_block"] == 128
    assert [p["name"] for p in description["parameters"]] == ["endpoints", "recv", "flags", "send", "send_key",
                                                             "my_flags", "epoch"]
    assert description["aboleth"]["passes"]
    source = (tmp_path / "alltoall_launcher.c").read_text()
    assert f"static const unsigned char alltoall_cubin[{len(cubin)}]" in source
    header = (tmp_path / "alltoall_launcher.h").read_text()
    assert ("CUresult alltoall_launch(CUstream stream, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z, "
            "CUdeviceptr endpoints, CUdeviceptr recv, CUdeviceptr flags, int64_t send, int32_t send_key, "
            "CUdeviceptr my_flags, int64_t epoch);") in header
    nvcc = nvcc_or_skip()
    include = Path(nvcc).resolve().parent.parent / "include"
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler")
    built = subprocess.run([compiler, "-std=c11", "-Wall", "-Wextra", "-Werror", "-I", str(include), "-c",
                            str(tmp_path / "alltoall_launcher.c"), "-o", str(tmp_path / "launcher.o")],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr


def test_the_device_function_links_into_triton_and_cuda(tmp_path: Path) -> None:
    result = export_seed("function", tmp_path)
    assert result.returncode == 0, result.stderr
    llvm_ir = (tmp_path / "alltoall_function.ll").read_text()
    assert "define i32 @alltoall_function(i64 %endpoints, i64 %recv, i64 %flags, i64 %send, i32 %send_key" in llvm_ir
    assert "define internal void @alltoall_body(" in llvm_ir and "ptx_kernel" not in llvm_ir
    # Triton: a stock kernel calls it through extern_libs.
    export_kernels.FUNCTION_PATH["path"] = str(tmp_path / "alltoall_function.ll")
    source = triton.compiler.ASTSource(export_kernels.call_alltoall_function,
                                       dict(export_kernels.FUNCTION_CALLER_SIGNATURE), {})
    compiled = triton.compile(source, target=TARGET,
                              options={"extern_libs": {"alltoall_function": str(tmp_path / "alltoall_function.ll")}})
    ptx = compiled.asm["ptx"]
    assert "st.release.sys.global.u64" in ptx and "ld.acquire.sys.global.u64" in ptx
    # As a launch specializes it (a small epoch is an i32, a key of 1 a constant): still links.
    specialized = dict(export_kernels.FUNCTION_CALLER_SIGNATURE, epoch="i32", send_key="constexpr")
    triton.compile(triton.compiler.ASTSource(export_kernels.call_alltoall_function, specialized, {"send_key": 1}),
                   target=TARGET,
                   options={"extern_libs": {"alltoall_function": str(tmp_path / "alltoall_function.ll")}})
    # CUDA: a kernel calling it through the header device-links with the PTX.
    header = (tmp_path / "alltoall_function.h").read_text()
    assert ('extern "C" __device__ int alltoall_function(uint64_t endpoints, uint64_t recv, uint64_t flags, '
            'int64_t send, int32_t send_key, uint64_t my_flags, int64_t epoch);') in header
    nvcc = nvcc_or_skip()
    (tmp_path / "caller.cu").write_text(
        '#include "alltoall_function.h"\n'
        'extern "C" __global__ void caller(uint64_t e, uint64_t r, uint64_t f, int64_t s, int32_t k, uint64_t m,\n'
        '                                  int64_t epoch) {\n'
        '  alltoall_function(e, r, f, s, k, m, epoch);\n'
        '}\n')
    gencode = ["-gencode", "arch=compute_90a,code=sm_90a"]
    for command in ([nvcc, *gencode, "-rdc=true", "-c", "caller.cu", "-o", "caller.o"],
                    [nvcc, *gencode, "-rdc=true", "-c", "alltoall_function.ptx", "-o", "function.o"],
                    [nvcc, *gencode, "-dlink", "caller.o", "function.o", "-cubin", "-o", "linked.cubin"]):
        built = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)
        assert built.returncode == 0, f"{' '.join(command)}: {built.stderr}"
    assert b"alltoall_function" in (tmp_path / "linked.cubin").read_bytes()


def test_an_output_path_that_is_a_file_is_a_one_line_error(tmp_path: Path) -> None:
    occupied = tmp_path / "occupied"
    occupied.write_text("not a directory")
    result = export_seed("kernel", occupied)
    assert result.returncode == 1
    assert result.stderr.strip() == f"aboleth: error: --out {occupied}: cannot write the kernel form there: File exists"


def test_export_mistakes_are_one_line_errors(tmp_path: Path) -> None:
    no_out = subprocess.run([sys.executable, "-m", "aboleth", "compile", SEED, "--kernel", "alltoall", "--target",
                             "p2p", "--signature", export_kernels.SEED_SIGNATURE, "--constexpr", "BYTES=256",
                             "--constexpr", "RANK=1", "--export", "kernel"], capture_output=True, text=True,
                            cwd=REPO_ROOT)
    assert no_out.returncode == 1
    assert no_out.stderr.strip() == "aboleth: error: --export kernel: name the output directory with --out DIR"
    wrong_emit = subprocess.run([sys.executable, "-m", "aboleth", "compile", SEED, "--kernel", "alltoall", "--target",
                                 "p2p", "--signature", export_kernels.SEED_SIGNATURE, "--constexpr", "BYTES=256",
                                 "--constexpr", "RANK=1", "--export", "kernel", "--out", str(tmp_path), "--emit",
                                 "aboleth"], capture_output=True, text=True, cwd=REPO_ROOT)
    assert wrong_emit.returncode == 1
    assert wrong_emit.stderr.strip() == "aboleth: error: --export kernel writes files; leave out --emit aboleth"
    # --out alone (the module the command line runs, as it passes the flag through).
    out_alone = subprocess.run([sys.executable, "-m", "aboleth.triton_compile", SEED, "--kernel", "alltoall",
                                "--target", "p2p", "--signature", export_kernels.SEED_SIGNATURE, "--constexpr",
                                "BYTES=256", "--constexpr", "RANK=1", "--out", str(tmp_path)],
                               capture_output=True, text=True, cwd=REPO_ROOT)
    assert out_alone.returncode == 2
    assert out_alone.stderr.strip() == "aboleth: error: --out DIR goes with --export fragment|kernel|function"
