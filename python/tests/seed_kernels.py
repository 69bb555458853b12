"""The seed's tier-2 all-to-all kernel for the tests: loaded from examples/triton/alltoall.py, the
one copy of the seed's text in the repository (the tests check it is verbatim)."""

import importlib.util
import pathlib

_PATH = pathlib.Path(__file__).resolve().parents[2] / "examples" / "triton" / "alltoall.py"
_SPEC = importlib.util.spec_from_file_location("aboleth_examples_triton_alltoall", _PATH)
assert _SPEC is not None and _SPEC.loader is not None, f"cannot load {_PATH}"
_MODULE = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_MODULE)

#: The seed's kernel, verbatim.
alltoall = _MODULE.alltoall
#: The file it is defined in (what `aboleth compile/sim KERNEL.py` take).
PATH = str(_PATH)
