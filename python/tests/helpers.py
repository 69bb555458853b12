"""Compiling kernels on the CPU for the tests, and capturing what a stage sees."""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Optional

import triton
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.compiler.compiler import ASTSource

TARGET = GPUTarget("cuda", 90, 32)

# Each operand-free description of an aboleth call as Triton prints it.
ABOLETH_CALL = re.compile(r'tt\.extern_elementwise(?P<operands>[^{]*)\{libname = "aboleth", libpath = "", '
                          r'pure = false, symbol = "(?P<symbol>[^"]+)"\} : \((?P<types>[^)]*)\) -> (?P<result>\S+)')


def compile_kernel(kernel: Any, signature: Dict[str, str], constexprs: Optional[Dict[str, Any]] = None,
                   options: Optional[Dict[str, Any]] = None) -> Any:
    """triton.compile for sm_90 on the CPU; returns the CompiledKernel."""
    return triton.compile(ASTSource(kernel, signature, constexprs or {}), target=TARGET, options=options)


def aboleth_calls(ttir: str) -> List[Dict[str, str]]:
    """The aboleth extern calls of TTIR text, in order: symbol, operand types and result type."""
    return [match.groupdict() for match in ABOLETH_CALL.finditer(ttir)]


class StopCompilation(Exception):
    """Raised by a capturing stage to end the compilation early."""


def chain_hook(wrap_stages: Callable[[Dict[str, Any]], None]) -> Callable[..., Any]:
    """Puts a hook in the slot that calls the hook already there, then ``wrap_stages(stages)``.

    Installed before aboleth, it runs before aboleth's stage is added; installed after, it sees
    the stages with aboleth's stage in them. Returns the hook.
    """
    previous = knobs.runtime.add_stages_inspection_hook

    def hook(*args: Any) -> Any:
        if not args:
            return previous() if previous is not None else ("test", "0")
        if previous is not None:
            previous(*args)
        wrap_stages(args[1])

    knobs.runtime.add_stages_inspection_hook = hook
    return hook


def capture_stage_output(name: str, captured: Dict[str, Any], stop: bool = False) -> Callable[..., Any]:
    """A chained hook that records the text (``captured[name]``) and the metadata
    (``captured[name + ".metadata"]``) that stage ``name`` returns, and optionally stops there."""

    def wrap(stages: Dict[str, Any]) -> None:
        if name not in stages:
            return
        original = stages[name]

        def stage(module: Any, metadata: Dict[str, Any]) -> Any:
            result = original(module, metadata)
            captured[name] = result.str()
            captured[name + ".module"] = result
            captured[name + ".input"] = module
            captured[name + ".metadata"] = dict(metadata)
            if stop:
                raise StopCompilation(name)
            return result

        stages[name] = stage

    return chain_hook(wrap)
