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

``launcher.bind(grid, args, constexprs)`` returns a callable for a launch repeated with the same
arguments (``aboleth.kv``'s per-layer sends): the specialization and the lookup are done once,
and each call is the driver call alone.

``Launcher(kernel, compilation=world.compilation)`` enters ``compilation()`` around the launches
that go through Triton (the first of each specialization, which compiles), and only those: a
cached launch needs no compilation block, and entering one costs microseconds on a path that
launches once per layer.

What it does not do: check that global variables the kernel reads are unchanged (Triton's run
does; the MoE kernels read constants only), or compile ahead of the first launch.
"""

from __future__ import annotations

import inspect
import contextlib
from typing import Any, Callable, ContextManager, Dict, List, Optional, Tuple

#: The Triton whose internals this relies on (``JITFunction.params``, ``device_caches``,
#: ``CompiledKernel.run``); any other goes through ``kernel[grid]``.
TRITON_VERSION = "3.6.0"


class Launcher:
    """``Launcher(kernel)[grid](*runtime_args, **constexprs)``; see the module docstring."""

    def __init__(self, kernel: Any, compilation: Optional[Callable[[], ContextManager[Any]]] = None) -> None:
        import triton
        self.kernel = kernel
        self.compilation = compilation
        params = getattr(kernel, "params", None)
        self.fast = triton.__version__ == TRITON_VERSION and params is not None and all(
            param.is_constexpr or not param.annotation for param in params)
        if self.fast:
            from triton import knobs
            from triton._C.libtriton import native_specialize_impl
            from triton.runtime.driver import driver
            self._knobs, self._specialize, self._driver = knobs, native_specialize_impl, driver
            self.runtime = [param for param in params if not param.is_constexpr]
            self.constexprs = [param for param in params if param.is_constexpr]
            # What native_specialize_impl takes besides the argument, per runtime parameter.
            self._flags = [(param.is_const, not param.do_not_specialize, not param.do_not_specialize_on_alignment)
                           for param in self.runtime]
            # The runtime parameters come first in every MoE kernel: positional arguments.
            self.fast = all(param.num == index for index, param in enumerate(self.runtime))
        # key -> (compiled kernel, the constexprs' values in parameter order)
        self.compiled: Dict[Tuple[Any, ...], Tuple[Any, List[Any]]] = {}
        self.launches = 0  # through the cached kernel, for the tests' profile
        self.misses = 0  # through Triton

    def __getitem__(self, grid: Tuple[int, ...]) -> Any:
        return lambda *args, **constexprs: self.launch(grid, args, constexprs)

    def _through_triton(self, grid: Tuple[int, ...], args: Tuple[Any, ...], constexprs: Dict[str, Any]) -> Any:
        with self.compilation() if self.compilation is not None else contextlib.nullcontext():
            return self.kernel[grid](*args, **constexprs)

    def _entry(self, grid: Tuple[int, ...], args: Tuple[Any, ...], constexprs: Dict[str, Any]) -> Any:
        """``(device, compiled kernel, constexpr values)`` for these arguments, compiling (and
        launching once through Triton) on a miss, which then returns ``(None, compiled, None)``;
        ``None`` when the kernel cannot take the fast path."""
        if not self.fast or len(args) != len(self.runtime):
            return None
        driver = self._driver.active
        device = driver.get_current_device()
        backend = self.kernel.device_caches[device][3]
        specialize = self._specialize
        specialization = tuple(specialize(backend, arg, is_const, specialize_value, specialize_alignment)
                               for arg, (is_const, specialize_value, specialize_alignment) in zip(args, self._flags))
        # Every keyword (constexprs, and options such as num_warps) with its value, in the
        # caller's order: a call site passes them in one order, and another order only costs
        # one more launch through Triton (whose own cache finds the same compiled kernel).
        key = (device, specialization, tuple(constexprs.items()))
        entry = self.compiled.get(key)
        if entry is None:
            values = [constexprs.get(param.name, param.default) for param in self.constexprs]
            if any(value is inspect.Parameter.empty for value in values):
                return None  # Triton names the missing one
            self.misses += 1
            compiled = self._through_triton(grid, args, constexprs)
            self.compiled[key] = (compiled, values)
            return (None, compiled, None)
        return (device, *entry)

    def _run(self, device: Any, compiled: Any, values: List[Any], grid: Tuple[int, ...],
             args: Tuple[Any, ...]) -> Any:
        """The driver call of a cached kernel, on the current stream, with Triton's launch hooks."""
        self.launches += 1
        stream = self._driver.active.get_current_stream(device)
        grid_x = grid[0]
        grid_y = grid[1] if len(grid) > 1 else 1
        grid_z = grid[2] if len(grid) > 2 else 1
        arguments = (*args, *values)
        runtime_knobs = self._knobs.runtime
        enter_hook, exit_hook = runtime_knobs.launch_enter_hook, runtime_knobs.launch_exit_hook
        # CompiledKernel.launch_metadata is None without an enter hook; asked only with one.
        metadata = compiled.launch_metadata(grid, stream, *arguments) if enter_hook is not None else None
        compiled.run(grid_x, grid_y, grid_z, stream, compiled.function, compiled.packed_metadata, metadata,
                     enter_hook, exit_hook, *arguments)
        return compiled

    def launch(self, grid: Tuple[int, ...], args: Tuple[Any, ...], constexprs: Dict[str, Any]) -> Any:
        entry = self._entry(grid, args, constexprs)
        if entry is None:
            return self._through_triton(grid, args, constexprs)
        device, compiled, values = entry
        if device is None:
            return compiled  # launched through Triton, which compiled it
        return self._run(device, compiled, values, grid, args)

    def bind(self, grid: Tuple[int, ...], args: Tuple[Any, ...], constexprs: Dict[str, Any]) -> Callable[[], Any]:
        """A callable that does ``launch(grid, args, constexprs)``, with the specialization and
        the cache lookup done at its first call and kept: for a launch repeated with the same
        argument objects (a plan's tables, a layer's cache), only the driver call is left. The
        arguments must not change meaning (a tensor's address, an integer's value) between
        calls; the current device must stay the one of the first call."""
        bound: List[Any] = []

        def run() -> Any:
            if bound:
                device, compiled, values = bound
                return self._run(device, compiled, values, grid, args)
            entry = self._entry(grid, args, constexprs)
            if entry is None:
                return self._through_triton(grid, args, constexprs)
            device, compiled, values = entry
            if device is None:
                return compiled  # this call compiled and launched it; the next one binds
            bound.extend(entry)
            return self._run(device, compiled, values, grid, args)

        return run
