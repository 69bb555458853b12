"""Which modules vLLM's Python needs at import time for the contract test that neither the GPU
image nor the carried wheels provide, read from the sources without importing them (the CPU
machine has no torch): the module-level imports of every module reachable from the vLLM modules
that tests/gpu/vllm_contract.py and aboleth.integrations.vllm import, walked through vLLM's source
and through the packages of the carried wheels (unpacked to a temporary directory), not through
the image's packages or the standard library. Imports inside functions, under `if TYPE_CHECKING:`
or a run-time condition (a call, an attribute such as an environment flag), and inside a `try:`
whose handler catches ImportError are not needed.

    python3 tests/gpu/vllm_import_closure.py VLLM_SOURCE_DIR IMAGE_MODULES_FILE WHEELS_DIR

IMAGE_MODULES_FILE lists the import names the GPU image provides (tests/gpu/
gpu_image_python_modules.txt; `#` starts a comment). Prints each missing top-level module with
the module that imports it, and exits 1 when any is missing. prepare_vllm_carry.sh runs it so
that a missing dependency is found here, not in a GPU call. It is a static reading: an import
made by a compiled extension, or a version too old for its user, is not seen.
"""

import ast
import glob
import os
import sys
import tempfile
import zipfile
from typing import Dict, Iterator, List, Set, Tuple

ROOTS = [
    "vllm",
    "vllm.model_executor.layers.fused_moe.modular_kernel",
    "vllm.model_executor.layers.fused_moe.topk_weight_and_reduce",
    "vllm.model_executor.layers.fused_moe.utils",
    "vllm.distributed.device_communicators.base_device_communicator",
    "vllm.platforms",
    "vllm.utils.network_utils",
]


def module_path(source: str, name: str) -> str:
    base = os.path.join(source, *name.split("."))
    for candidate in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.exists(candidate):
            return candidate
    return ""


def guarded_by_import_error(handlers: List[ast.ExceptHandler]) -> bool:
    for handler in handlers:
        names = [handler.type] if not isinstance(handler.type, ast.Tuple) else list(handler.type.elts)
        if handler.type is None or any(isinstance(n, ast.Name) and n.id in
                                       ("ImportError", "ModuleNotFoundError", "Exception") for n in names):
            return True
    return False


def import_time_names(statements: List[ast.stmt], postponed_annotations: bool) -> Set[str]:
    """Names read while the module runs: its top-level and class-body expressions, not function
    bodies (and not annotations under `from __future__ import annotations`)."""
    names: Set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for decorator in getattr(node, "decorator_list", []):
                visit(decorator)
            return
        if postponed_annotations and isinstance(node, ast.AnnAssign):
            if node.value is not None:
                visit(node.value)
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            names.add(node.id)
        for child in ast.iter_child_nodes(node):
            visit(child)

    for statement in statements:
        visit(statement)
    return names


def module_level_imports(tree: ast.Module, package: str) -> Iterator[Tuple[str, List[str]]]:
    """(module, imported names) of the imports run when the module is imported, including a
    `name = LazyLoader(name, globals(), "module")` whose name is read at import time (vLLM's
    lazy modules load on first attribute access, e.g. by a class-level annotation)."""
    lazy: Dict[str, str] = {}

    def walk(statements: List[ast.stmt]) -> Iterator[Tuple[str, List[str]]]:
        for statement in statements:
            if isinstance(statement, ast.Import):
                for alias in statement.names:
                    yield alias.name, []
            elif isinstance(statement, ast.ImportFrom):
                if statement.level:
                    parts = package.split(".")[: len(package.split(".")) - (statement.level - 1)]
                    base = ".".join(parts + ([statement.module] if statement.module else []))
                else:
                    base = statement.module or ""
                yield base, [alias.name for alias in statement.names]
            elif isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Call):
                call = statement.value
                if (isinstance(call.func, ast.Name) and call.func.id == "LazyLoader"
                        and len(call.args) == 3 and isinstance(call.args[2], ast.Constant)
                        and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name)):
                    lazy[statement.targets[0].id] = str(call.args[2].value)
            elif isinstance(statement, ast.If):
                # A run-time condition (a call, an environment flag) guards an optional
                # backend: only unconditional imports and plain constant tests are followed;
                # under `if TYPE_CHECKING:` only the else branch runs.
                test = ast.unparse(statement.test)
                if "TYPE_CHECKING" in test:
                    yield from walk(statement.orelse)
                elif not any(isinstance(node, (ast.Call, ast.Attribute)) for node in ast.walk(statement.test)):
                    yield from walk(statement.body)
                    yield from walk(statement.orelse)
            elif isinstance(statement, ast.Try):
                if not guarded_by_import_error(statement.handlers):
                    yield from walk(statement.body)
                yield from walk(statement.finalbody)
            elif isinstance(statement, (ast.With,)):
                yield from walk(statement.body)

    yield from walk(tree.body)
    postponed = any(isinstance(statement, ast.ImportFrom) and statement.module == "__future__"
                    and any(alias.name == "annotations" for alias in statement.names)
                    for statement in tree.body)
    read = import_time_names(tree.body, postponed)
    for name, module in lazy.items():
        if name in read:
            yield module, []


def closure(search_path: List[str], image: Set[str]) -> Dict[str, str]:
    """Module -> the first module found importing it, for every top-level module reached that
    is neither vLLM nor in a directory of `search_path` (the vLLM source, the unpacked wheels):
    walked through vLLM and through the wheels' packages; the image's packages are not walked."""
    seen: Set[str] = set()
    outside: Dict[str, str] = {}
    pending = [(root, "") for root in ROOTS]
    while pending:
        name, importer = pending.pop()
        if name in seen or name.split(".")[0].lower() in image:
            continue
        seen.add(name)
        path = next((found for found in (module_path(directory, name) for directory in search_path)
                     if found), "")
        if not path:
            top = name.split(".")[0]
            if "." not in name or not any(module_path(d, top) for d in search_path):
                outside.setdefault(top, importer)
            continue
        if path.endswith((".so", ".pyd")):
            continue
        # Importing a.b.c imports a and a.b first.
        parts = name.split(".")
        pending.extend((".".join(parts[:i]), name) for i in range(1, len(parts)))
        package = name if path.endswith("__init__.py") else ".".join(parts[:-1])
        with open(path, encoding="utf-8") as file:
            tree = ast.parse(file.read(), path)
        for module, names in module_level_imports(tree, package):
            if not module:
                continue
            pending.append((module, name))
            # `from package import name` may import a submodule; a name that is not one is
            # found in no directory and ignored above (its package exists).
            pending.extend((f"{module}.{imported}", name) for imported in names if imported != "*")
    return outside


def unpack_wheels(directory: str, target: str) -> None:
    for wheel in glob.glob(os.path.join(directory, "*.whl")):
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(target)


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    source, image_file, wheels = sys.argv[1:4]
    with open(image_file, encoding="utf-8") as file:
        provided = {name for line in file for name in line.split("#")[0].split()}
    image = {name.lower() for name in provided}
    standard = set(sys.stdlib_module_names)
    with tempfile.TemporaryDirectory() as unpacked:
        unpack_wheels(wheels, unpacked)
        reached = closure([source, unpacked], image | standard)
    missing = sorted((name, importer) for name, importer in reached.items()
                     if name not in standard and not name.startswith("_"))
    for name, importer in missing:
        print(f"missing: {name} (imported by {importer}): carry a wheel that provides it")
    print(f"vllm import closure: {len(missing)} module(s) missing from the image and the wheels of {wheels}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
