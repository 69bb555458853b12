"""The export forms of a tier-2 program (``aboleth compile KERNEL.py --export FORM --out DIR``):
the kernel compiled by Triton with the aboleth stage, written out for code that is not a Triton
launch.

- ``fragment``: the kernel's TTIR after the aboleth stage (the communication generated, the
  user's computation kept) as a private ``tt.func`` named ``<kernel>_fragment``, without
  locations, to splice into another TTIR module. :func:`splice_fragment` replaces the body of a
  stub function in a host module (a ``@triton.jit(noinline=True)`` function with the same
  parameters, which Triton keeps as a ``tt.call``) with it; ``triton.compile`` of the spliced
  ``.ttir`` file then builds a kernel doing both.
- ``kernel``: the standalone kernel: ``<kernel>.cubin``, ``<kernel>.json`` (entry name, threads,
  shared memory, parameters) and a small C launcher, ``<kernel>_launcher.{h,c}`` (the cubin
  embedded; CUDA driver API: ``<kernel>_load``, ``<kernel>_launch``, ``<kernel>_unload``).
- ``function``: a device function ``int <kernel>_function(params...)`` returning 0, as
  ``<kernel>_function.ll`` (LLVM IR text of Triton 3.6's LLVM, for Triton's ``extern_libs`` and
  that LLVM's tools) and ``<kernel>_function.ptx`` with ``<kernel>_function.h`` (for CUDA:
  compile the PTX with ``nvcc -rdc=true -c`` and device-link it with the caller). Every thread
  of a block of ``num_warps * 32`` threads calls it, with the block's index as the program id;
  pointers are passed as 64-bit device addresses (Triton's extern calls take no pointers). It
  is text, not
  bitcode: Triton's wheel has no bitcode writer and no LLVM of its version is installed here
  (clang 16 cannot read Triton's IR).

What it does not do: launch anything, or export kernels that need Triton's global or profile
scratch memory, more than one CTA, or (for ``function``) shared memory, which the caller's
kernel would share; those are refused by name. Parameters are the kernel's non-constexpr ones,
in order; pointers are device addresses (``CUdeviceptr`` in the launcher, ``uint64_t`` in the
function's header).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple

FORMS = ("fragment", "kernel", "function")

# Triton scalar types and their C types (the launcher's and the function header's parameters).
_C_TYPES = {
    "i1": "int8_t", "i8": "int8_t", "i16": "int16_t", "i32": "int32_t", "i64": "int64_t",
    "u1": "uint8_t", "u8": "uint8_t", "u16": "uint16_t", "u32": "uint32_t", "u64": "uint64_t",
    "fp32": "float", "fp64": "double",
}


class ExportError(ValueError):
    """A kernel this export form cannot carry: the message names what and why."""


@dataclass(frozen=True)
class Parameter:
    """One parameter of the exported kernel: its name and Triton type (``*i64``, ``i32``)."""

    name: str
    triton_type: str

    @property
    def is_pointer(self) -> bool:
        return self.triton_type.startswith("*")

    def c_type(self, pointer: str) -> str:
        if self.is_pointer:
            return pointer
        c_type = _C_TYPES.get(self.triton_type)
        if c_type is None:
            raise ExportError(f"parameter `{self.name}` has type {self.triton_type}, which the exported C interface "
                              f"does not pass; use one of {', '.join(_C_TYPES)} or a pointer")
        return c_type


def parameters(kernel: Any, signature: Dict[str, str]) -> List[Parameter]:
    """The kernel's runtime parameters in order (constexprs are compiled in)."""
    return [Parameter(name, signature[name]) for name in kernel.arg_names if signature[name] != "constexpr"]


def _check_launchable(compiled: Any, form: str) -> None:
    metadata = compiled.metadata
    for field, what in (("global_scratch_size", "global scratch memory"),
                        ("profile_scratch_size", "profile scratch memory")):
        size = getattr(metadata, field, 0) or 0
        if size:
            raise ExportError(f"--export {form}: the kernel needs {size} bytes of Triton's {what}, which the export "
                              "does not allocate; export a kernel without it")
    if getattr(metadata, "num_ctas", 1) != 1:
        raise ExportError(f"--export {form}: the kernel has {metadata.num_ctas} CTAs per program; the export "
                          "handles one")


def write(form: str, compiled: Any, kernel_parameters: Sequence[Parameter], out_dir: str) -> List[str]:
    """Writes ``form`` of ``compiled`` (a Triton ``CompiledKernel`` built with the aboleth
    stage) under ``out_dir``; returns the paths written."""
    if form not in FORMS:
        raise ExportError(f"--export {form}: not an export form; use one of {', '.join(FORMS)}")
    _check_launchable(compiled, form)
    name = compiled.metadata.name
    if form == "fragment":
        files = {f"{name}.fragment.ttir": fragment_text(compiled)}
    elif form == "kernel":
        files = kernel_files(compiled, kernel_parameters)
    else:
        files = function_files(compiled, kernel_parameters)
    written = []
    try:
        os.makedirs(out_dir, exist_ok=True)
        for file_name, contents in files.items():
            path = os.path.join(out_dir, file_name)
            mode = "wb" if isinstance(contents, bytes) else "w"
            with open(path, mode) as file:
                file.write(contents)
            written.append(path)
    except OSError as error:
        raise ExportError(f"--out {out_dir}: cannot write the {form} form there: {error.strerror or error}") from None
    return written


# ---------------------------------------------------------------------------------------------
# fragment
# ---------------------------------------------------------------------------------------------


def _without_locations(ttir: str) -> str:
    """``ttir`` parsed by Triton and printed without locations (so it splices without ``#loc``
    aliases of another module)."""
    import tempfile

    from triton._C.libtriton import ir, nvidia

    context = ir.context()
    ir.load_dialects(context)
    nvidia.load_dialects(context)
    with tempfile.NamedTemporaryFile("w", suffix=".ttir", delete=False) as file:
        file.write(ttir)
        path = file.name
    try:
        module = ir.parse_mlir_module(path, context)
        return module.str_nodebug()
    finally:
        os.unlink(path)


_FUNC = re.compile(r"^  tt\.func (public |private )?@(\"[^\"]+\"|[\w.$-]+)\((.*?)\)(.*?)\{\n(.*?)^  \}\n",
                   re.MULTILINE | re.DOTALL)


def _functions(module_text: str) -> List[re.Match]:
    return list(_FUNC.finditer(module_text))


def _argument_types(arguments: str) -> List[str]:
    # `%x: !tt.ptr<i64> {tt.divisibility = 16 : i32}, %y: i32`: the types, attributes dropped.
    types = []
    for match in re.finditer(r"%[\w$.-]+: ([^,{]+?)(?: \{[^}]*\})?(?:,|$)", arguments):
        types.append(match.group(1).strip())
    return types


def fragment_text(compiled: Any) -> str:
    """The kernel after the aboleth stage as ``tt.func private @<name>_fragment``."""
    ttir = compiled.asm.get("aboleth")
    if ttir is None:
        raise ExportError("--export fragment: the kernel did not go through the aboleth stage (no aboleth calls?)")
    text = _without_locations(ttir)
    name = compiled.metadata.name
    functions = [function for function in _functions(text) if function.group(2).strip('"') == name]
    if len(functions) != 1:
        raise ExportError(f"--export fragment: found {len(functions)} functions named {name} in the stage's TTIR")
    function = functions[0]
    callee = re.search(r"tt\.call @(\"[^\"]+\"|[\w.$-]+)", function.group(5))
    if callee is not None:
        raise ExportError(f"--export fragment: the kernel calls {callee.group(1)} (a noinline function), which a "
                          "fragment cannot carry; let Triton inline it (drop noinline=True)")
    header = (f"// aboleth --export fragment of `{name}` (TTIR after the aboleth stage, no locations).\n"
              f"// Splice it with aboleth.export.splice_fragment(host_ttir, this_text, stub_name).\n")
    body = (f"  tt.func private @{name}_fragment({function.group(3)}){function.group(4)}{{\n"
            f"{function.group(5)}  }}\n")
    return f"{header}module {{\n{body}}}\n"


def splice_fragment(host_ttir: str, fragment: str, stub: str) -> str:
    """``host_ttir`` (a module, with or without locations) with the body of its function whose
    name contains ``stub`` (a ``@triton.jit(noinline=True)`` function the host kernel calls)
    replaced by ``fragment``'s. The stub must take the fragment's parameters, in order."""
    host = _without_locations(host_ttir) if "loc(" in host_ttir else host_ttir
    fragments = _functions(fragment)
    if len(fragments) != 1:
        raise ExportError("splice_fragment: the fragment text holds no single tt.func (write it with --export "
                          "fragment)")
    stubs = [function for function in _functions(host)
             if stub in function.group(2) and (function.group(1) or "").strip() == "private"]
    if len(stubs) != 1:
        names = ", ".join(function.group(2) for function in _functions(host))
        raise ExportError(f"splice_fragment: {len(stubs)} private functions of the host module are named like "
                          f"`{stub}` (functions: {names}); declare the stub with @triton.jit(noinline=True) and "
                          "call it from the kernel")
    target, source = stubs[0], fragments[0]
    host_types, fragment_types = _argument_types(target.group(3)), _argument_types(source.group(3))
    if "->" in target.group(4).split("attributes")[0]:
        raise ExportError(f"splice_fragment: the stub {target.group(2)} returns a value; a fragment returns "
                          "nothing, so make the stub return nothing")
    if host_types != fragment_types:
        raise ExportError(f"splice_fragment: the stub {target.group(2)} takes ({', '.join(host_types)}) but the "
                          f"fragment takes ({', '.join(fragment_types)}); give the stub the kernel's parameters")
    spliced = (f"  tt.func private @{target.group(2)}({source.group(3)}){source.group(4)}{{\n"
               f"{source.group(5)}  }}\n")
    return host[:target.start()] + spliced + host[target.end():]


# ---------------------------------------------------------------------------------------------
# kernel
# ---------------------------------------------------------------------------------------------


def _plan_summary(metadata: Any) -> Any:
    """The aboleth stage's plan summary the metadata carries (a dict; JSON text in a cache hit)."""
    summary = getattr(metadata, "aboleth", None)
    return json.loads(summary) if isinstance(summary, str) else summary


def kernel_files(compiled: Any, kernel_parameters: Sequence[Parameter]) -> Dict[str, Any]:
    metadata = compiled.metadata
    name = metadata.name
    threads = metadata.num_warps * 32
    shared = metadata.shared
    cubin = compiled.asm["cubin"]
    c_parameters = [f"{p.c_type('CUdeviceptr')} {p.name}" for p in kernel_parameters]
    description = {
        "entry": name, "threads_per_block": threads, "num_warps": metadata.num_warps, "shared_bytes": shared,
        "target": f"sm_{compiled.metadata.target.arch}",
        "parameters": [{"name": p.name, "triton_type": p.triton_type, "c_type": p.c_type("CUdeviceptr")}
                       for p in kernel_parameters],
        "trailing_parameters": ["global_scratch (0)", "profile_scratch (0)"],
        "aboleth": _plan_summary(metadata),
    }
    guard = f"ABOLETH_EXPORT_{name.upper()}_H"
    signature = ", ".join(["CUstream stream", "unsigned int grid_x", "unsigned int grid_y", "unsigned int grid_z"]
                          + c_parameters)
    header = f"""// {name}_launcher.h: the standalone kernel `{name}` exported by aboleth (--export kernel).
// Generated; do not edit. Link {name}_launcher.c and libcuda (-lcuda).
#ifndef {guard}
#define {guard}
#include <cuda.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {{
#endif

// Loads the embedded cubin into the current context (once per process: later calls return
// CUDA_SUCCESS; a failed load can be retried).
CUresult {name}_load(void);
// Launches {threads} threads per block ({metadata.num_warps} warps), {shared} bytes of shared
// memory, on `stream`, over grid (grid_x, grid_y, grid_z): one program per block.
CUresult {name}_launch({signature});
// Unloads the module.
CUresult {name}_unload(void);

#ifdef __cplusplus
}}
#endif
#endif
"""
    hex_lines = []
    for start in range(0, len(cubin), 16):
        hex_lines.append("  " + ", ".join(f"0x{byte:02x}" for byte in cubin[start:start + 16]) + ",")
    arguments = ", ".join([f"&{p.name}" for p in kernel_parameters] + ["&scratch", "&profile_scratch"])
    source = f"""// {name}_launcher.c: loads and launches the kernel `{name}` (generated by aboleth --export kernel;
// do not edit). The cubin is embedded below.
#include "{name}_launcher.h"

#include <stddef.h>

static const unsigned char {name}_cubin[{len(cubin)}] = {{
{chr(10).join(hex_lines)}
}};

static CUmodule {name}_module;
static CUfunction {name}_function;

// One module per process, loaded into the context current at the first call.
CUresult {name}_load(void) {{
  if ({name}_function != NULL) return CUDA_SUCCESS;
  CUmodule module = NULL;
  CUfunction function = NULL;
  CUresult result = cuModuleLoadData(&module, {name}_cubin);
  if (result != CUDA_SUCCESS) return result;
  result = cuModuleGetFunction(&function, module, "{name}");
  if (result == CUDA_SUCCESS && {shared} > 49152) {{
    // More than the default 48 KiB of dynamic shared memory must be asked for.
    result = cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, {shared});
  }}
  if (result != CUDA_SUCCESS) {{
    cuModuleUnload(module);  // a failed load leaves nothing behind: the next call tries again
    return result;
  }}
  {name}_module = module;
  {name}_function = function;
  return CUDA_SUCCESS;
}}

CUresult {name}_launch({signature}) {{
  if ({name}_function == NULL) {{
    CUresult loaded = {name}_load();
    if (loaded != CUDA_SUCCESS) return loaded;
  }}
  // Triton's kernels take two trailing scratch pointers; this kernel uses neither.
  CUdeviceptr scratch = 0, profile_scratch = 0;
  void* arguments[] = {{{arguments}}};
  return cuLaunchKernel({name}_function, grid_x, grid_y, grid_z, {threads}, 1, 1, {shared}, stream, arguments, NULL);
}}

CUresult {name}_unload(void) {{
  if ({name}_function == NULL) return CUDA_SUCCESS;
  {name}_function = NULL;
  return cuModuleUnload({name}_module);
}}
"""
    return {f"{name}.cubin": cubin, f"{name}.json": json.dumps(description, indent=1) + "\n",
            f"{name}_launcher.h": header, f"{name}_launcher.c": source}


# ---------------------------------------------------------------------------------------------
# function
# ---------------------------------------------------------------------------------------------


def _split_parameters(text: str) -> List[str]:
    """``text`` (an LLVM parameter list) split at top-level commas."""
    parts, depth, current = [], 0, ""
    for character in text:
        if character == "(":
            depth += 1
        elif character == ")":
            depth -= 1
        if character == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += character
    if current.strip():
        parts.append(current.strip())
    return parts


def _llvm_type(parameter: str) -> str:
    match = re.match(r"(ptr(?: addrspace\(\d+\))?|i\d+|float|double|half|bfloat)(?=\s|$)", parameter)
    if match is None:
        raise ExportError(f"--export function: cannot read the LLVM parameter `{parameter}`")
    return match.group(1)


def function_llvm(compiled: Any, kernel_parameters: Sequence[Parameter]) -> Tuple[str, str]:
    """(the function's name, LLVM IR text): the kernel made an internal function, called by an
    exported ``i32 <name>_function(...)`` that passes null scratch pointers and returns 0."""
    name = compiled.metadata.name
    llir = compiled.asm["llir"]
    definition = re.search(rf"^define ptx_kernel void @{re.escape(name)}\((.*)\)(.*)\{{$", llir, re.MULTILINE)
    if definition is None:
        raise ExportError(f"--export function: no kernel `{name}` in Triton's LLVM IR")
    llvm_parameters = _split_parameters(definition.group(1))
    if len(llvm_parameters) != len(kernel_parameters) + 2:
        raise ExportError(f"--export function: the kernel has {len(llvm_parameters)} LLVM parameters, expected the "
                          f"{len(kernel_parameters)} of its signature and Triton's two scratch pointers")
    types = [_llvm_type(parameter) for parameter in llvm_parameters]
    body_name = f"{name}_body"
    internal = llir.replace(definition.group(0),
                            f"define internal void @{body_name}({definition.group(1)}){definition.group(2)}{{", 1)
    function = f"{name}_function"
    # Pointers travel as 64-bit addresses (Triton's extern calls take scalars, not pointers).
    formals, conversions, actuals = [], [], []
    for llvm_type, parameter in zip(types, kernel_parameters):
        if llvm_type.startswith("ptr"):
            formals.append(f"i64 %{parameter.name}")
            conversions.append(f"  %{parameter.name}.pointer = inttoptr i64 %{parameter.name} to {llvm_type}\n")
            actuals.append(f"{llvm_type} %{parameter.name}.pointer")
        else:
            formals.append(f"{llvm_type} %{parameter.name}")
            actuals.append(f"{llvm_type} %{parameter.name}")
    actuals += [f"{types[-2]} null", f"{types[-1]} null"]
    wrapper = (f"\n; The exported device function (aboleth --export function): every thread of a block of\n"
               f"; {compiled.metadata.num_warps * 32} threads calls it; pointers are 64-bit device addresses; it returns 0\n"
               f"; (Triton's extern calls need a result).\n"
               f"define i32 @{function}({', '.join(formals)}) {{\n"
               f"{''.join(conversions)}"
               f"  call void @{body_name}({', '.join(actuals)})\n"
               f"  ret i32 0\n}}\n")
    return function, internal + wrapper


def function_files(compiled: Any, kernel_parameters: Sequence[Parameter]) -> Dict[str, str]:
    metadata = compiled.metadata
    if metadata.shared:
        raise ExportError(f"--export function: the kernel uses {metadata.shared} bytes of shared memory, which a "
                          "device function would share with its caller's kernel; export it as a kernel instead")
    function, llvm_text = function_llvm(compiled, kernel_parameters)
    from triton._C.libtriton import llvm

    kernel_ptx = compiled.asm["ptx"]
    version = re.search(r"^\.version (\d+)\.(\d+)", kernel_ptx, re.MULTILINE)
    target = re.search(r"^\.target (sm_\w+)", kernel_ptx, re.MULTILINE)
    if version is None or target is None:
        raise ExportError("--export function: the kernel's PTX has no .version or .target line")
    llvm.init_targets()
    ptx = llvm.translate_to_asm(llvm_text, "nvptx64-nvidia-cuda", target.group(1).rstrip("a"),
                                f"+ptx{version.group(1)}{version.group(2)}", ["nvptx-mad-wide-opt"],
                                metadata.enable_fp_fusion, False)
    ptx = re.sub(r"^\.version \d+\.\d+", f".version {version.group(1)}.{version.group(2)}", ptx, flags=re.MULTILINE)
    ptx = re.sub(r"^\.target sm_\w+", f".target {target.group(1)}", ptx, flags=re.MULTILINE)
    ptx = re.sub(r",\s*debug|debug,\s*", "", ptx)
    c_parameters = ", ".join(f"{p.c_type('uint64_t')} {p.name}" for p in kernel_parameters)
    header = f"""// {function}.h: the tier-2 kernel `{metadata.name}` as a device function (aboleth --export function).
// Generated; do not edit. Link {function}.ptx with nvcc -rdc=true (for {target.group(1)}).
// Every thread of a block of {metadata.num_warps * 32} threads calls it with the same arguments; the block's
// index is the program id. Pointers are passed as 64-bit device addresses. It returns 0.
#pragma once
#include <stdint.h>

extern "C" __device__ int {function}({c_parameters});
"""
    return {f"{function}.ll": llvm_text, f"{function}.ptx": ptx, f"{function}.h": header}
