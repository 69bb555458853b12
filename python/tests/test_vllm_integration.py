"""The vLLM backend (aboleth.integrations.vllm, integrations/vllm/0001-aboleth-all2all-backend.patch)
without vLLM installed and without a GPU, against the pinned vLLM source (the sdist that `make
vllm-source` fetches into .cache/vllm/):

- the patch applies to it and the patched files compile;
- the classes of aboleth.integrations.vllm define every member that vLLM's base classes leave
  abstract, read from vLLM's own source with ``ast`` (``All2AllManagerBase``'s methods whose body
  raises NotImplementedError; the ``abstractmethod``s of the prepare/finalize bases), and a class
  with one member taken away is reported;
- so does the KV connector (aboleth.kv.vllm_connector) for ``KVConnectorBase_V1``, with the
  parameters vLLM calls each member with, and the three-argument constructor vLLM's factory
  requires of an external connector;
- the patched files import only names the package exports, construct the manager with arguments
  its ``__init__`` takes, and list the backend names the package answers to.

The contract with tensors (prepare, experts, finalize against a one-process MoE layer) needs a GPU:
tests/gpu/vllm_contract.py."""

from __future__ import annotations

import ast
import os
import py_compile
import subprocess
import tarfile
from typing import Dict, List, Set

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PATCH = os.path.join(ROOT, "integrations", "vllm", "0001-aboleth-all2all-backend.patch")
PACKAGE = os.path.join(ROOT, "python", "aboleth", "integrations", "vllm")
SDIST = os.environ.get("ABOLETH_VLLM_SDIST", os.path.join(ROOT, ".cache", "vllm", "vllm-0.33.0.tar.gz"))

PATCHED = [
    "vllm/config/compilation.py",
    "vllm/config/parallel.py",
    "vllm/distributed/device_communicators/cuda_communicator.py",
    "vllm/model_executor/layers/fused_moe/config.py",
    "vllm/model_executor/layers/fused_moe/all2all_utils.py",
    "vllm/v1/worker/sentinel/gpu_worker_sentinel.py",
]
INTERFACES = [
    "vllm/distributed/device_communicators/base_device_communicator.py",
    "vllm/model_executor/layers/fused_moe/modular_kernel.py",
    "vllm/distributed/kv_transfer/kv_connector/v1/base.py",
]
KV_CONNECTOR = os.path.join(ROOT, "python", "aboleth", "kv", "vllm_connector.py")


@pytest.fixture(scope="module")
def vllm_source(tmp_path_factory) -> str:
    """The pinned vLLM's files this test reads, extracted, with the patch applied."""
    if not os.path.exists(SDIST):
        pytest.fail(f"the pinned vLLM source is missing ({SDIST}): run `make vllm-source` "
                    "(python3 integrations/vllm/fetch_source.py)")
    root = str(tmp_path_factory.mktemp("vllm"))
    wanted = {f"vllm-0.33.0/{path}" for path in PATCHED + INTERFACES}
    with tarfile.open(SDIST) as archive:
        members = [member for member in archive.getmembers() if member.name in wanted]
        archive.extractall(root, members=members, filter="data")
    source = os.path.join(root, "vllm-0.33.0")
    assert sorted(os.path.relpath(os.path.join(directory, name), source)
                  for directory, _, names in os.walk(source) for name in names) == sorted(PATCHED + INTERFACES)
    result = subprocess.run(["git", "apply", "--verbose", PATCH], cwd=source, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return source


def parse(path: str) -> ast.Module:
    with open(path) as file:
        return ast.parse(file.read(), filename=path)


def classes_of(module: ast.Module) -> Dict[str, ast.ClassDef]:
    return {node.name: node for node in module.body if isinstance(node, ast.ClassDef)}


def methods_of(node: ast.ClassDef) -> Dict[str, ast.FunctionDef]:
    return {item.name: item for item in node.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))}


def raises_not_implemented(function: ast.FunctionDef) -> bool:
    body = [statement for statement in function.body
            if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    raised = body[0].exc.func if isinstance(body[0].exc, ast.Call) else body[0].exc
    return isinstance(raised, ast.Name) and raised.id == "NotImplementedError"


def is_abstract(function: ast.FunctionDef) -> bool:
    return any((isinstance(decorator, ast.Name) and decorator.id == "abstractmethod")
               or (isinstance(decorator, ast.Attribute) and decorator.attr == "abstractmethod")
               for decorator in function.decorator_list)


def abstract_members(module: ast.Module, name: str, not_implemented: bool) -> Set[str]:
    """The members class ``name`` of ``module`` leaves to subclasses, its bases' in the same module
    included: its abstractmethods, and with ``not_implemented`` the methods that only raise
    NotImplementedError (how ``All2AllManagerBase``, not an ABC, marks them; in the ABCs such a
    method is optional: ``prepare_async`` is called only when ``supports_async()``)."""
    classes = classes_of(module)
    members: Set[str] = set()
    node = classes[name]
    for base in node.bases:
        base_name = base.id if isinstance(base, ast.Name) else None
        if base_name in classes:
            members |= abstract_members(module, base_name, not_implemented)
    for method_name, function in methods_of(node).items():
        if is_abstract(function) or (not_implemented and raises_not_implemented(function)):
            members.add(method_name)
        else:
            members.discard(method_name)  # defined here: no longer left to subclasses
    return members


def missing_members(required: Set[str], node: ast.ClassDef) -> List[str]:
    """What of ``required`` class ``node`` does not define with a body of its own."""
    defined = {name for name, function in methods_of(node).items() if not raises_not_implemented(function)}
    return sorted(required - defined)


def package_class(file: str, name: str) -> ast.ClassDef:
    return classes_of(parse(os.path.join(PACKAGE, file)))[name]


def test_the_patch_applies_to_the_pinned_vllm_and_the_patched_files_compile(vllm_source):
    for path in PATCHED:
        py_compile.compile(os.path.join(vllm_source, path), doraise=True)
    with open(os.path.join(vllm_source, "vllm/config/parallel.py")) as file:
        parallel = file.read()
    literal = parallel[parallel.index("All2AllBackend = Literal["):]
    literal = literal[:literal.index("]")]
    backends = ast.literal_eval(next(node for node in ast.walk(parse(os.path.join(PACKAGE, "manager.py")))
                                     if isinstance(node, ast.Assign)
                                     and getattr(node.targets[0], "id", None) == "BACKENDS").value)
    with open(os.path.join(vllm_source, "vllm/v1/worker/sentinel/gpu_worker_sentinel.py")) as file:
        sentinel = file.read()
    fault_tolerant = sentinel[sentinel.index("FT_BACKEND_SET = frozenset("):]
    fault_tolerant = fault_tolerant[:fault_tolerant.index(")")]
    for name in backends:
        assert f'"{name}"' in literal, name
        assert f'"{name}"' in fault_tolerant, name  # the manager's fault-tolerance hooks are built


def test_the_manager_defines_what_all2allmanagerbase_leaves_abstract(vllm_source):
    base = parse(os.path.join(vllm_source, INTERFACES[0]))
    required = abstract_members(base, "All2AllManagerBase", not_implemented=True)
    # What vLLM 0.33.0 leaves to subclasses; a release that adds one must be looked at.
    assert {"get_handle", "dispatch", "combine", "dispatch_router_logits", "query_active_mask", "query_fault",
            "clean_buffers"} <= required, required
    assert missing_members(required, package_class("manager.py", "AbolethAll2AllManager")) == []


@pytest.mark.parametrize("name", ["AbolethPrepareAndFinalize", "AbolethLowLatencyPrepareAndFinalize"])
def test_the_prepare_finalize_classes_define_every_abstract_member(vllm_source, name):
    base = parse(os.path.join(vllm_source, INTERFACES[1]))
    required = abstract_members(base, "FusedMoEPrepareAndFinalizeModular", not_implemented=False)
    assert {"prepare", "finalize", "activation_format", "topk_indices_dtype", "max_num_tokens_per_rank",
            "num_dispatchers", "output_is_reduced"} <= required, required
    node = package_class("prepare_finalize.py", name)
    assert [base.attr for base in node.bases if isinstance(base, ast.Attribute)] == \
        ["FusedMoEPrepareAndFinalizeModular"]
    assert missing_members(required, node) == []


def test_a_class_without_one_member_is_reported(vllm_source):
    base = parse(os.path.join(vllm_source, INTERFACES[1]))
    required = abstract_members(base, "FusedMoEPrepareAndFinalizeModular", not_implemented=False)
    node = package_class("prepare_finalize.py", "AbolethPrepareAndFinalize")
    node.body = [item for item in node.body if getattr(item, "name", None) != "finalize"]
    assert missing_members(required, node) == ["finalize"]
    stub = ast.parse("class Stub:\n    def prepare(self):\n        raise NotImplementedError('later')\n").body[0]
    assert "prepare" in missing_members(required, stub)


def parameters(function: ast.FunctionDef) -> List[str]:
    arguments = function.args
    names = [argument.arg for argument in arguments.posonlyargs + arguments.args + arguments.kwonlyargs]
    if arguments.vararg:
        names.append("*" + arguments.vararg.arg)
    if arguments.kwarg:
        names.append("**" + arguments.kwarg.arg)
    return names


def test_the_kv_connector_defines_every_abstract_member_with_vllms_parameters(vllm_source):
    base = parse(os.path.join(vllm_source, INTERFACES[2]))
    required = abstract_members(base, "KVConnectorBase_V1", not_implemented=False)
    # What vLLM 0.33.0 leaves to subclasses; a release that adds one must be looked at.
    assert {"start_load_kv", "wait_for_layer_load", "save_kv_layer", "wait_for_save", "get_num_new_matched_tokens",
            "update_state_after_alloc", "build_connector_meta"} <= required, required
    connector = classes_of(parse(KV_CONNECTOR))
    node = connector["AbolethKVConnector"]
    assert [getattr(base, "id", None) for base in node.bases] == ["KVConnectorBase_V1"]
    assert missing_members(required, node) == []
    base_methods = methods_of(classes_of(base)["KVConnectorBase_V1"])
    for name, function in methods_of(node).items():
        if name in base_methods:  # an override: vLLM calls it with the base's parameters
            assert parameters(function) == parameters(base_methods[name]), name
    # vLLM's factory refuses an external connector whose constructor lacks kv_cache_config.
    assert parameters(methods_of(node)["__init__"])[:4] == ["self", "vllm_config", "role", "kv_cache_config"]
    metadata = connector["AbolethKVConnectorMetadata"]
    assert [getattr(base, "id", None) for base in metadata.bases] == ["KVConnectorMetadata"]
    assert "KVConnectorMetadata" in classes_of(base)
    node.body = [item for item in node.body if getattr(item, "name", None) != "save_kv_layer"]
    assert missing_members(required, node) == ["save_kv_layer"]


def test_the_patched_files_use_only_what_the_package_exports(vllm_source):
    exported = ast.literal_eval(next(node for node in parse(os.path.join(PACKAGE, "__init__.py")).body
                                     if isinstance(node, ast.Assign)
                                     and getattr(node.targets[0], "id", None) == "__all__").value)
    imported = []
    for path in PATCHED:
        for node in ast.walk(parse(os.path.join(vllm_source, path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("aboleth"):
                assert node.module == "aboleth.integrations.vllm", (path, node.module)
                imported += [alias.name for alias in node.names]
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "AbolethAll2AllManager":
                init = methods_of(package_class("manager.py", "AbolethAll2AllManager"))["__init__"]
                assert len(node.args) <= len(init.args.args) - 1, path
    assert sorted(set(imported)) == ["AbolethAll2AllManager", "AbolethPrepareAndFinalize", "make_prepare_finalize"]
    assert set(imported) <= set(exported)


def test_the_import_closure_finds_what_vllm_would_fail_to_import(tmp_path) -> None:
    """tests/gpu/vllm_import_closure.py on a made-up vLLM tree and wheel: an unconditional
    import, one reached through a carried wheel, a LazyLoader read by a class annotation are
    missing; imports in functions, under TYPE_CHECKING, behind a run-time condition, guarded by
    ImportError, and a LazyLoader never read at import time are not."""
    import zipfile
    source = tmp_path / "source"
    (source / "vllm" / "sub").mkdir(parents=True)
    (source / "vllm" / "__init__.py").write_text(
        "import os\nimport imagepkg.part\nfrom vllm.sub import lazy\nfrom . import plain\n"
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import typing_only\nelse:\n    import else_branch\n"
        "if os.environ.get('X'):\n    import optional_backend\n"
        "try:\n    import guarded\nexcept ImportError:\n    pass\n"
        "def later():\n    import in_function\n")
    (source / "vllm" / "plain.py").write_text("import carried\n")
    (source / "vllm" / "sub" / "__init__.py").write_text("")
    (source / "vllm" / "sub" / "lazy.py").write_text(
        "from vllm.utils import LazyLoader\nread = LazyLoader('read', globals(), 'lazy_read')\n"
        "unread = LazyLoader('unread', globals(), 'lazy_unread')\nclass Grammar:\n    matcher: read.Matcher\n")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "carried-1.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr("carried/__init__.py", "import wheel_dependency\n")
        wheel.writestr("carried-1.0.dist-info/METADATA", "Name: carried\n")
    image = tmp_path / "image.txt"
    image.write_text("# the image\nimagepkg\n")
    script = os.path.join(ROOT, "tests", "gpu", "vllm_import_closure.py")
    result = subprocess.run(["python3", script, str(source), str(image), str(wheels)],
                            capture_output=True, text=True, timeout=60)
    missing = {line.split()[1] for line in result.stdout.splitlines() if line.startswith("missing:")}
    assert missing == {"else_branch", "wheel_dependency", "lazy_read"}, result.stdout + result.stderr
    assert result.returncode == 1
    assert "wheel_dependency (imported by carried)" in result.stdout
