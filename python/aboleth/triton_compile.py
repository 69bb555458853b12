"""What ``aboleth compile KERNEL.py`` and ``aboleth sim KERNEL.py`` need from Triton, on a machine
without a GPU (``GPUTarget("cuda", 90, 32)``): ``python -m aboleth.triton_compile FILE --kernel
NAME --target T --signature ... [--constexpr ...] --emit WHAT``.

The ``aboleth`` command line (Rust, ``aboleth-cli``; the same whether run as the cargo-built
binary, the package's ``aboleth`` script or ``python -m aboleth``) runs this module for ``.py``
inputs. It loads the file, finds the ``@triton.jit`` kernel, checks the signature, constexprs
and ``--num-warps`` (a mistake is one ``aboleth: error: ...`` line naming the argument and the
fix, exit status 2), compiles it, and prints one of: the Aboleth IR after the pipeline
(``--emit aboleth``), the statistics JSON (``--emit stats``), the TTIR after the ``aboleth``
stage (``--emit ttir``), the PTX (``--emit ptx``), or Triton's TTIR before the stage
(``--emit ttir-input``, what ``aboleth sim`` lifts). Errors in the kernel are told at the
kernel's Python line (exit status 1). It does not launch anything.
"""

from __future__ import annotations

import argparse
import json
import runpy
import sys
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .hook import PLANNED_TARGETS, TARGETS

TARGET_CAPABILITY = 90
WARP_SIZE = 32


class CommandLineError(Exception):
    """A usage error: the message names the argument and the fix."""


def _parse_pairs(values: Sequence[str], flag: str) -> List[Tuple[str, str]]:
    pairs = []
    seen = set()
    for value in values:
        for item in value.split(","):
            item = item.strip()
            if not item:
                continue
            name, separator, rest = item.partition("=")
            name, rest = name.strip(), rest.strip()
            if not separator or not name or not rest:
                raise CommandLineError(f"{flag}: `{item}` is not NAME=VALUE")
            if name in seen:
                raise CommandLineError(f"{flag}: `{name}` is given twice; give each parameter once")
            seen.add(name)
            pairs.append((name, rest))
    return pairs


def _check_signature_type(name: str, type_text: str) -> None:
    """Refuses what Triton's ``str_to_ty`` would turn into a ``KeyError`` deep in the compiler."""
    import triton.language as tl

    if type_text == "constexpr":
        raise CommandLineError(f"--signature: `{name}=constexpr`: give constexpr parameters their value with "
                               f"--constexpr {name}=VALUE")
    try:
        tl.str_to_ty(type_text, None)
    except (KeyError, IndexError, ValueError, AttributeError):
        raise CommandLineError(f"--signature: `{name}={type_text}`: `{type_text}` is not a Triton type; use one of "
                               "i1, i8, i16, i32, i64, u8, u16, u32, u64, fp16, bf16, fp32, fp64, or `*` and a type "
                               "for a pointer (*i64, *i8, *fp32)") from None


def _constexpr_value(name: str, text: str) -> Any:
    """An integer, a float or a boolean: what a constexpr of a communication kernel can be."""
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    if text in ("True", "true"):
        return True
    if text in ("False", "false"):
        return False
    raise CommandLineError(f"--constexpr: `{name}={text}`: the value must be an integer, a float or true/false")


def _check_num_warps(num_warps: Optional[int]) -> None:
    # Triton asserts a power of two; a CTA holds at most 1024 threads, 32 warps.
    if num_warps is not None and (num_warps <= 0 or num_warps > 32 or num_warps & (num_warps - 1)):
        raise CommandLineError(f"--num-warps {num_warps}: warps per program must be a power of two from 1 to 32")


def _load_kernel(path: str, name: str) -> Any:
    import triton

    try:
        namespace = runpy.run_path(path)
    except FileNotFoundError:
        raise CommandLineError(f"{path}: no such file") from None
    kernel = namespace.get(name)
    if kernel is None:
        kernels = sorted(k for k, v in namespace.items() if isinstance(v, triton.runtime.JITFunction))
        raise CommandLineError(f"{path}: no kernel named `{name}` (found: {', '.join(kernels) or 'none'})")
    if not isinstance(kernel, triton.runtime.JITFunction):
        raise CommandLineError(f"{path}: `{name}` is not a @triton.jit function")
    return kernel


def _capture_ttir(kernel: Any, signature: Dict[str, str], constexprs: Dict[str, Any], options: Dict[str, Any]) -> str:
    """Compiles up to Triton's ``ttir`` stage and returns its text (aboleth not installed)."""
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget

    captured: Dict[str, str] = {}

    class _Stop(Exception):
        pass

    previous = knobs.runtime.add_stages_inspection_hook

    def hook(*args: Any) -> Any:
        if not args:
            return previous() if previous is not None else ("aboleth-cli", "0")
        if previous is not None:
            previous(*args)
        stages = args[1]
        original = stages.get("ttir")
        if original is None:
            return

        def stage(module: Any, metadata: Dict[str, Any]) -> Any:
            result = original(module, metadata)
            captured["ttir"] = result.str()
            raise _Stop()

        stages["ttir"] = stage

    knobs.runtime.add_stages_inspection_hook = hook
    try:
        triton.compile(triton.compiler.ASTSource(kernel, signature, constexprs),
                       target=GPUTarget("cuda", TARGET_CAPABILITY, WARP_SIZE), options=options)
    except _Stop:
        pass
    finally:
        knobs.runtime.add_stages_inspection_hook = previous
    if "ttir" not in captured:
        raise CommandLineError("Triton did not reach its ttir stage")
    return captured["ttir"]


def compile_command(arguments: argparse.Namespace) -> int:
    import triton
    from triton.backends.compiler import GPUTarget

    from . import Config, _aboleth, compilation

    _check_num_warps(arguments.num_warps)
    if arguments.export is not None and arguments.out is None:
        raise CommandLineError(f"--export {arguments.export}: name the output directory with --out DIR")
    kernel = _load_kernel(arguments.file, arguments.kernel)
    signature = dict(_parse_pairs(arguments.signature, "--signature"))
    constexprs = {name: _constexpr_value(name, value)
                  for name, value in _parse_pairs(arguments.constexpr, "--constexpr")}
    parameters = list(kernel.arg_names)
    for flag, names in (("--signature", signature), ("--constexpr", constexprs)):
        for name in names:
            if name not in parameters:
                raise CommandLineError(f"{flag}: `{name}` is not a parameter of {arguments.kernel} "
                                       f"(parameters: {', '.join(parameters)})")
    for name in set(signature) & set(constexprs):
        raise CommandLineError(f"`{name}` is given both a --signature type and a --constexpr value; give one")
    for name, type_text in signature.items():
        _check_signature_type(name, type_text)
    for name in constexprs:
        signature[name] = "constexpr"
    missing = [name for name in parameters if name not in signature]
    if missing:
        raise CommandLineError(f"--signature: give a type (e.g. {missing[0]}=*i64 or {missing[0]}=i32) or a "
                               f"--constexpr value for: {', '.join(missing)}")
    options: Dict[str, Any] = {}
    if arguments.num_warps is not None:
        options["num_warps"] = arguments.num_warps
    disabled = list(arguments.disable_pass)
    if arguments.export is not None and arguments.emit not in ("stats", "ptx"):
        raise CommandLineError(f"--export {arguments.export} writes files; leave out --emit {arguments.emit}")
    if arguments.out is not None and arguments.export is None:
        raise CommandLineError("--out DIR goes with --export fragment|kernel|function")
    if arguments.export is not None:
        arguments.emit = "ptx"  # compile all the way (the cubin and LLVM IR are what the forms need)
    if arguments.emit == "ttir-input":
        # Triton's TTIR before the aboleth stage (what `aboleth sim KERNEL.py` lifts).
        sys.stdout.write(_capture_ttir(kernel, signature, constexprs, options))
        return 0
    if arguments.target not in TARGETS and (arguments.emit not in ("aboleth", "stats")
                                            or arguments.export is not None):
        raise CommandLineError(f"--target {arguments.target} has no code generation yet (experimental: lowered and "
                               f"simulated); plan the kernel for it with --emit stats or --emit aboleth, or compile "
                               f"for one of {', '.join(TARGETS)}")
    if arguments.emit in ("aboleth", "stats"):
        ttir = _capture_ttir(kernel, signature, constexprs, options)
        if arguments.target in TARGETS:
            pipeline = Config(target=arguments.target, passes_off=arguments.passes_off, disabled_passes=disabled,
                              immediate_signals=arguments.immediate_signals,
                              packet_signals=arguments.packet_signals).pipeline_options()
        else:
            # A lowered target without code generation (efa): planned only, never installed.
            pipeline = _aboleth.PipelineOptions(arguments.target, passes_off=arguments.passes_off,
                                                disabled_passes=disabled,
                                                immediate_signals=arguments.immediate_signals,
                                                packet_signals=arguments.packet_signals, plan_only=True)
        _, summary_json = _aboleth.run_stage(ttir, pipeline, source_name=f"{arguments.kernel}.ttir", plan_only=True)
        summary = json.loads(summary_json)
        if arguments.emit == "aboleth":
            sys.stdout.write(summary.get("aboleth_ir") or "")
        else:
            stats = {"kernels": [{
                "name": arguments.kernel, "target": arguments.target, "passes": summary.get("passes", []),
                "counts": summary.get("counts"), "per_iteration": summary.get("per_iteration", False),
                "conditional": summary.get("conditional", False),
            }]}
            print(json.dumps(stats, indent=2))
        return 0
    with tempfile.TemporaryDirectory(prefix="aboleth-cli-cache-") as cache:
        from triton import knobs
        saved = knobs.cache.dir
        knobs.cache.dir = cache
        try:
            with compilation(target=arguments.target, passes_off=arguments.passes_off, disabled_passes=disabled,
                             immediate_signals=arguments.immediate_signals,
                             packet_signals=arguments.packet_signals):
                compiled = triton.compile(triton.compiler.ASTSource(kernel, signature, constexprs),
                                          target=GPUTarget("cuda", TARGET_CAPABILITY, WARP_SIZE), options=options)
        finally:
            knobs.cache.dir = saved
    if arguments.export is not None:
        from . import export

        if arguments.out is None:
            raise CommandLineError(f"--export {arguments.export}: name the output directory with --out DIR")
        try:
            written = export.write(arguments.export, compiled, export.parameters(kernel, signature), arguments.out)
        except export.ExportError as error:
            raise CommandLineError(str(error)) from None
        print(f"wrote the {arguments.export} form of {arguments.kernel} ({arguments.target}): "
              + ", ".join(written))
        return 0
    if arguments.emit == "ttir":
        sys.stdout.write(compiled.asm.get("aboleth") or compiled.asm["ttir"])
    else:
        sys.stdout.write(compiled.asm["ptx"])
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m aboleth.triton_compile",
                                     description="Compile a @triton.jit kernel for aboleth (no GPU needed); "
                                                 "`aboleth compile|sim KERNEL.py` runs this.")
    parser.add_argument("file", help="the Python file defining the kernel")
    parser.add_argument("--kernel", required=True, help="the @triton.jit function's name")
    parser.add_argument("--target", required=True, choices=PLANNED_TARGETS)
    parser.add_argument("--signature", action="append", default=[],
                        help="NAME=TYPE[,NAME=TYPE...] with Triton's types: *i64, i64, i32, ...")
    parser.add_argument("--constexpr", action="append", default=[], help="NAME=VALUE (repeatable)")
    parser.add_argument("--num-warps", type=int, default=None)
    parser.add_argument("--passes-off", action="store_true", help="library-style lowering (the baseline)")
    parser.add_argument("--disable-pass", action="append", default=[], metavar="PASS")
    parser.add_argument("--immediate-signals", action="store_true",
                        help="flags are observed only through wait_signal: mlx5 signals may ride on their puts")
    parser.add_argument("--packet-signals", action="store_true",
                        help="a signal publishes only its put, read after its wait: p2p signals may travel "
                             "in their puts' data as LL packets")
    parser.add_argument("--emit", choices=("aboleth", "ttir", "ptx", "stats", "ttir-input"), default="stats",
                        help="ttir-input: Triton's TTIR before the aboleth stage")
    parser.add_argument("--export", choices=("fragment", "kernel", "function"), default=None,
                        help="write an export form of the kernel under --out (aboleth.export)")
    parser.add_argument("--out", default=None, help="the directory --export writes to")
    return parser


def _kernel_error(error: BaseException) -> Optional[str]:
    """The message of an error in the user's kernel (Triton's, located at their line), or None
    when ``error`` is not one."""
    from triton.compiler.errors import CompilationError

    if isinstance(error, CompilationError):
        return str(error).strip()
    return None


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    arguments = parser.parse_args(argv)
    try:
        return compile_command(arguments)
    except CommandLineError as error:
        print(f"aboleth: error: {error}", file=sys.stderr)
        return 2
    except ValueError as error:
        # The stage's errors are `file:line:column: error: ...` at the kernel's line already.
        message = str(error)
        if ": error: " in message:
            # Located already (`file:line:column: error: ...`): print it as compilers do.
            message = message.removeprefix("aboleth: ")
        else:
            message = f"aboleth: error: {message}"
        print(message, file=sys.stderr)
        return 1
    except Exception as error:
        message = _kernel_error(error)
        if message is None:
            raise
        print(message, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
