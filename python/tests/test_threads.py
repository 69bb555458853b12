"""Thread safety of install/uninstall/compilation and of compiling while installed."""

from __future__ import annotations

import os
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List

from triton import knobs
from triton.backends.compiler import Language

import aboleth
from helpers import chain_hook, compile_kernel
from test_hook import VECTOR_ADD

STAGES = ["ttir", "ttgir", "llir", "ptx", "cubin"]


def run_in_threads(count: int, work) -> None:
    """Runs ``work(index)`` in ``count`` threads released together; re-raises the first error."""
    barrier = threading.Barrier(count)
    errors: List[BaseException] = []

    def body(index: int) -> None:
        try:
            barrier.wait()
            work(index)
        except BaseException as error:  # collected and re-raised in the main thread
            errors.append(error)

    threads = [threading.Thread(target=body, args=(index, )) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def test_concurrent_compilation_blocks_never_stack_or_lose_the_hook():
    calls = threading.local()
    base_hook = chain_hook(lambda stages: setattr(calls, "count", getattr(calls, "count", 0) + 1))
    base_cache = os.environ["TRITON_CACHE_DIR"]

    def work(index: int) -> None:
        generator = random.Random(index)
        for _ in range(200):
            target = generator.choice(aboleth.TARGETS)
            with aboleth.compilation(target=target, passes_off=generator.random() < 0.5):
                assert aboleth.is_installed()
                hook = knobs.runtime.add_stages_inspection_hook
                assert hook is not base_hook
                stages: Dict[str, Any] = {name: None for name in STAGES}
                before = getattr(calls, "count", 0)
                hook(object(), stages, None, Language.TRITON, 90)
                # One aboleth stage, right after ttir, and the chained hook called once.
                assert list(stages) == ["ttir", "aboleth", "ttgir", "llir", "ptx", "cubin"]
                assert calls.count == before + 1
                assert knobs.cache.dir.startswith(os.path.join(base_cache, "aboleth-"))

    run_in_threads(8, work)
    assert not aboleth.is_installed()
    aboleth.uninstall()  # the blocks left the installation dormant
    assert knobs.runtime.add_stages_inspection_hook is base_hook
    assert knobs.cache.dir == base_cache
    assert os.environ["TRITON_CACHE_DIR"] == base_cache


# Real passes: a configuration naming an unknown one is refused where it is made.
PASS_NAMES = ["size-buffers", "batch-commands", "coalesce-doorbells", "order-publications", "elide-epochs"]


def test_concurrent_installs_leave_one_hook_with_one_of_the_configurations():
    base_hook = chain_hook(lambda stages: None)
    configs: List[aboleth.Config] = []

    def work(index: int) -> None:
        for round_ in range(100):
            configs.append(aboleth.install(target=aboleth.TARGETS[(index + round_) % 3],
                                           disabled_passes=[PASS_NAMES[index % len(PASS_NAMES)]]))

    run_in_threads(8, work)
    hook = knobs.runtime.add_stages_inspection_hook
    stages: Dict[str, Any] = {name: None for name in STAGES}
    hook(object(), stages, None, Language.TRITON, 90)
    assert list(stages).count("aboleth") == 1
    assert aboleth.current_config() in configs
    assert knobs.cache.dir.endswith(f"aboleth-{aboleth.cache_salt(aboleth.current_config())}")
    aboleth.uninstall()
    assert knobs.runtime.add_stages_inspection_hook is base_hook


def test_kernels_compile_concurrently_while_installed():
    reference = compile_kernel(*VECTOR_ADD).asm["ptx"]
    aboleth.install(target="mlx5")
    with ThreadPoolExecutor(max_workers=4) as pool:
        kernels = list(pool.map(lambda _: compile_kernel(*VECTOR_ADD), range(4)))
    assert all(kernel.asm["ptx"] == reference for kernel in kernels)
    assert all("aboleth" in kernel.asm for kernel in kernels)
