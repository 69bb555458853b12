"""Shared fixtures: every test gets its own Triton cache directory and leaves the stage-hook slot
and aboleth's installation as it found them. CPU only: kernels are compiled for
GPUTarget("cuda", 90, 32) with the ptxas bundled in the triton==3.6.0 wheel; no GPU, driver or
torch is needed."""

import os

# Read by Triton when it is imported: skip backend discovery through entry points.
os.environ.setdefault("TRITON_BACKENDS_IN_TREE", "1")
os.environ.pop("TRITON_ALWAYS_COMPILE", None)

import pytest  # noqa: E402
from triton import knobs  # noqa: E402

import aboleth  # noqa: E402


@pytest.fixture(autouse=True)
def isolated_triton(tmp_path, monkeypatch):
    """A fresh TRITON_CACHE_DIR per test; restores the hook slot and uninstalls aboleth after."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    saved_hook = knobs.runtime.add_stages_inspection_hook
    knobs.runtime.add_stages_inspection_hook = None
    yield
    aboleth.uninstall()
    knobs.runtime.add_stages_inspection_hook = saved_hook
