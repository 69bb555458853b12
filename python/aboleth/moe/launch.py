"""Launching the MoE kernels without Triton's per-call binding: ``Launcher(kernel)[grid](*args,
**constexprs)`` is ``kernel[grid](*args, **constexprs)``, measured at about twice as fast from
Python.

A dispatch or a combine is a handful of launches of the same kernels with the same constexprs,
and Triton 3.6's ``JITFunction.run`` spends most of a launch in Python: binding two dozen
keyword arguments, building and hashing its cache key, checking globals (the host profile of a
4096-token dispatch: about 40 us per launch besides the driver call). Here the first launch of
each specialization goes through Triton (which compiles, inside the caller's
``world.compilation()`` block when there is one, and returns its ``CompiledKernel``); later
launches look that kernel up by the constexprs and by what Triton specializes each runtime
argument on, computed with Triton's own ``native_specialize_impl`` (a pointer's dtype and 16-byte
alignment, an integer's width, divisibility by 16 and being 1), and call the compiled kernel's
launcher directly, with Triton's launch hooks. A kernel with annotated runtime parameters, or
a Triton other than 3.6.0, launches through ``kernel[grid]`` every time.

What it does not do: check that global variables the kernel reads are unchanged (Triton's run
does; the MoE kernels read constants only), or compile ahead of the first launch.
"""

from __future__ import annotations

import inspect
from typing import Any, Dict, List, Tuple

#: The Triton whose internals this relies on (``JITFunction.params``, ``device_caches``,
#: ``CompiledKernel.run``); any other goes through ``kernel[grid]``.
TRITON_VERSION = "3.6.0"


class Launcher:
    """``Launcher(kernel)[grid](*runtime_args, **constexprs)``; see the module docstring."""

    def __init__(self, kernel: Any) -> None:
        import triton
        self.kernel = kernel
        params = getattr(kernel, "params", None)
        self.fast = triton.__version__ == TRITON_VERSION and params is not None and all(
            param.is_constexpr or not param.annotation for param in params)
        if self.fast:
            self.runtime = [param for param in params if not param.is_constexpr]
            self.constexprs = [param for param in params if param.is_constexpr]
            # The runtime parameters come first in every MoE kernel: positional arguments.
            self.fast = all(param.num == index for index, param in enumerate(self.runtime))
        self.compiled: Dict[Tuple[Any, ...], Any] = {}
        self.launches = 0  # through the cached kernel, for the tests' profile
        self.misses = 0  # through Triton

    def __getitem__(self, grid: Tuple[int, ...]) -> Any:
        return lambda *args, **constexprs: self.launch(grid, args, constexprs)

    def launch(self, grid: Tuple[int, ...], args: Tuple[Any, ...], constexprs: Dict[str, Any]) -> Any:
        if not self.fast or len(args) != len(self.runtime):
            return self.kernel[grid](*args, **constexprs)
        from triton import knobs
        from triton._C.libtriton import native_specialize_impl
        from triton.runtime.driver import driver
        device = driver.active.get_current_device()
        backend = self.kernel.device_caches[device][3]
        values = [constexprs.get(param.name, param.default) for param in self.constexprs]
        if any(value is inspect.Parameter.empty for value in values):
            return self.kernel[grid](*args, **constexprs)  # Triton names the missing one
        specialization = tuple(
            native_specialize_impl(backend, arg, param.is_const, not param.do_not_specialize,
                                   not param.do_not_specialize_on_alignment)
            for arg, param in zip(args, self.runtime))
        # Every keyword (constexprs, and options such as num_warps) with its value.
        key = (device, specialization, tuple(sorted(constexprs.items())))
        compiled = self.compiled.get(key)
        if compiled is None:
            self.misses += 1
            compiled = self.kernel[grid](*args, **constexprs)
            self.compiled[key] = compiled
            return compiled
        self.launches += 1
        stream = driver.active.get_current_stream(device)
        grid_x = grid[0]
        grid_y = grid[1] if len(grid) > 1 else 1
        grid_z = grid[2] if len(grid) > 2 else 1
        arguments: List[Any] = list(args) + values
        metadata = compiled.launch_metadata(grid, stream, *arguments)
        compiled.run(grid_x, grid_y, grid_z, stream, compiled.function, compiled.packed_metadata, metadata,
                     knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook, *arguments)
        return compiled
