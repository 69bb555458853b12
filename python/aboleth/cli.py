"""``aboleth compile KERNEL.py``: what the compiler does to a Triton kernel, on a machine without
a GPU (``GPUTarget("cuda", 90, 32)``).

The Rust ``aboleth`` binary hands ``.py`` files to ``python -m aboleth compile``; this module
loads the file, finds the ``@triton.jit`` kernel, compiles it with the given signature and
constexprs, and prints one of: the Aboleth IR after the pipeline (``--emit aboleth``), the
statistics JSON of ``aboleth compile --emit stats`` (``--emit stats``), the TTIR after the
``aboleth`` stage (``--emit ttir``) or the PTX (``--emit ptx``). ``aboleth`` and ``stats`` work
for every target; ``ttir`` and ``ptx`` need TTIR code generation, which exists for p2p so far.
It does not launch anything.
"""

from __future__ import annotations

import argparse
import json
import runpy
import sys
import tempfile
from typing import Any, Dict, List, Optional, Sequence

TARGET_CAPABILITY = 90
WARP_SIZE = 32


class CommandLineError(Exception):
    """A usage error: the message names the argument and the fix."""


def _parse_pairs(values: Sequence[str], flag: str) -> List[tuple]:
    pairs = []
    for value in values:
        for item in value.split(","):
            item = item.strip()
            if not item:
                continue
            name, separator, rest = item.partition("=")
            if not separator or not name or not rest:
                raise CommandLineError(f"{flag}: `{item}` is not NAME=VALUE")
            pairs.append((name.strip(), rest.strip()))
    return pairs


def _constexpr_value(text: str) -> Any:
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    if text in ("True", "true"):
        return True
    if text in ("False", "false"):
        return False
    return text


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

    from . import _aboleth, compilation

    kernel = _load_kernel(arguments.file, arguments.kernel)
    signature = dict(_parse_pairs(arguments.signature, "--signature"))
    constexprs = {name: _constexpr_value(value) for name, value in _parse_pairs(arguments.constexpr, "--constexpr")}
    parameters = list(kernel.arg_names)
    for name in list(signature) + list(constexprs):
        if name not in parameters:
            raise CommandLineError(f"--signature/--constexpr: `{name}` is not a parameter of {arguments.kernel} "
                                   f"(parameters: {', '.join(parameters)})")
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
    if arguments.emit == "ttir-input":
        # Triton's TTIR before the aboleth stage (what `aboleth sim KERNEL.py` lifts).
        sys.stdout.write(_capture_ttir(kernel, signature, constexprs, options))
        return 0
    if arguments.emit in ("aboleth", "stats"):
        ttir = _capture_ttir(kernel, signature, constexprs, options)
        config = json.dumps({"target": arguments.target, "passes_off": arguments.passes_off,
                             "disabled_passes": disabled, "immediate_signals": arguments.immediate_signals,
                             "packet_signals": arguments.packet_signals,
                             "source_name": f"{arguments.kernel}.ttir", "plan_only": True})
        _, summary_json = _aboleth.run_stage(ttir, config)
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
    if arguments.emit == "ttir":
        sys.stdout.write(compiled.asm.get("aboleth") or compiled.asm["ttir"])
    else:
        sys.stdout.write(compiled.asm["ptx"])
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aboleth", description="Aboleth for Triton kernels (no GPU needed).")
    commands = parser.add_subparsers(dest="command", required=True)
    compile_parser = commands.add_parser("compile", help="compile a @triton.jit kernel and show what aboleth did")
    compile_parser.add_argument("file", help="the Python file defining the kernel")
    compile_parser.add_argument("--kernel", required=True, help="the @triton.jit function's name")
    compile_parser.add_argument("--target", required=True, choices=("mlx5", "proxy", "p2p"))
    compile_parser.add_argument("--signature", action="append", default=[],
                                help="NAME=TYPE[,NAME=TYPE...] with Triton's types: *i64, i64, i32, ...")
    compile_parser.add_argument("--constexpr", action="append", default=[], help="NAME=VALUE (repeatable)")
    compile_parser.add_argument("--num-warps", type=int, default=None)
    compile_parser.add_argument("--passes-off", action="store_true", help="library-style lowering (the baseline)")
    compile_parser.add_argument("--disable-pass", action="append", default=[], metavar="PASS")
    compile_parser.add_argument("--immediate-signals", action="store_true",
                                help="flags are observed only through wait_signal: mlx5 signals may ride on their puts")
    compile_parser.add_argument("--packet-signals", action="store_true",
                                help="a signal publishes only its put, read after its wait: p2p signals may travel "
                                     "in their puts' data as LL packets")
    compile_parser.add_argument("--emit", choices=("aboleth", "ttir", "ptx", "stats", "ttir-input"), default="stats",
                                help="ttir-input: Triton's TTIR before the aboleth stage")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    arguments = parser.parse_args(argv)
    try:
        return compile_command(arguments)
    except CommandLineError as error:
        print(f"aboleth: error: {error}", file=sys.stderr)
        return 2
    except (NotImplementedError, ValueError) as error:
        print(str(error) if str(error).startswith("aboleth") else f"aboleth: error: {error}", file=sys.stderr)
        return 1
