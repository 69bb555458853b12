"""The ``aboleth`` stage in Triton 3.6's compiler pipeline (``docs/TRITON_BRIDGE.md``, "The stage").

:func:`install` puts one chained hook into ``triton.knobs.runtime.add_stages_inspection_hook``.
For every Triton-language kernel compiled while it is installed, the hook first calls the hook
that was there before (if any), then inserts a stage ``aboleth`` right after ``ttir``. The stage:

1. prints the module (``module.str()``, the TTIR after Triton's ttir passes);
2. fast path: without ``libname = "aboleth"`` in the text it returns the module object untouched
   (no Rust call, no metadata);
3. otherwise calls ``aboleth._aboleth.run_stage(text, config.pipeline_options(),
   source_name=...)`` (the GIL is released in Rust), stores the returned summary JSON in
   ``metadata["aboleth"]``, and returns the module unchanged if the text came back unchanged, or
   the new text parsed back into the module's MLIR context otherwise.

The Rust stage compiles the communication for the configured transport (``docs/TRITON_BRIDGE.md``);
its errors are ``ValueError`` at the kernel's Python line (``NotImplementedError`` for a lowered op
that TTIR code generation has no translation of). :class:`Config` is the Python face of the
configuration; the Rust pipeline checks it, through ``aboleth._aboleth.PipelineOptions``, when
it is made.

Cache: Triton 3.6 does not put the hook in its cache key, and a cache hit skips the hook. So while
installed, ``triton.knobs.cache.dir`` points at ``<previous cache dir>/aboleth-<salt>``, where the
salt hashes the bridge version, the Rust build and the aboleth Python sources (``cache_salt``),
and the configuration (target, passes off, disabled passes, immediate and packet signals):
changing any of them recompiles, and the same configuration hits the cache. Called with no arguments (Triton 3.7's contract) the hook
returns ``(key, hash)`` with the same salt. A ``@triton.jit`` function's in-memory cache
(``JITFunction.device_caches``) is keyed only by specialization and options, so the installation
also chains Triton's ``jit_post_compile_hook``: a function whose kernel went through the stage
with aboleth calls keeps one set of in-memory caches per configuration, and the set of the
configuration in force is the one Triton looks in. A kernel launched under one configuration and
then under another is compiled again (or found in the disk cache of that configuration); coming
back to the first finds its kernel in memory. When no configuration is in force (after the last
block), functions keep the caches of the last one, so a kernel compiled in a block can be
launched after it.

Entering and leaving ``compilation()`` is on the launch path of the seed's host example (a block
around every launch), so it costs a few dictionary operations: the salt is memoized and the build
digest computed once per process; the functions' caches are switched only when the salt changes;
and when the last block ends, the installation stays in place, **dormant**: no configuration is
in force, so the hook passes every compilation through unchanged (kernels compile as without
aboleth, and a kernel with aboleth calls fails to link, as it would), while the hook slots and the
salted cache directory stay until :func:`uninstall` restores them. A kernel without aboleth calls compiled while dormant is stored in the salted
directory: the same binary, in another directory; and Triton still finds there the kernels the
last configuration compiled (as it finds them in the functions' memory). The next block finds everything in place. If
the cache directory's override was changed while dormant, the next block takes the new one as
its base; so is the directory ``TRITON_CACHE_DIR`` / ``TRITON_HOME`` name when they change (a
test suite's per-test cache directories), and a hook slot somebody emptied (``knobs.runtime``
``reset()`` or ``scope()``) gets aboleth's hook back. :func:`is_dormant` says whether the hooks
are in place with no configuration in force.

Threads: one lock guards install, uninstall and the configuration; each compilation reads the
configuration once, when the hook runs, so its stage uses one configuration. The configuration is
process-wide, like the hook slot and the cache directory (Triton picks the directory before it
calls the hook): threads compiling at the same time should agree on it. The salted directory is
set as the cache knob's override only, not propagated to ``TRITON_CACHE_DIR`` in ``os.environ``
(a subprocess sees the user's directory); uninstalling restores the override as it was.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import dataclasses
import functools
import hashlib
import json
import os
import pathlib
import tempfile
import threading
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from triton import knobs
from triton._C.libtriton import ir
from triton.backends.compiler import Language

from . import _aboleth
from .language import ABOLETH_LIBNAME

__all__ = [
    "TARGETS",
    "PLANNED_TARGETS",
    "STAGE",
    "BRIDGE_VERSION",
    "Config",
    "install",
    "uninstall",
    "compilation",
    "is_installed",
    "is_dormant",
    "current_config",
    "cache_salt",
]

#: The transports a kernel can be compiled for (those of the Rust ``Transport`` enum with code
#: generation; efa is lowered and simulated for Aboleth IR kernels only).
TARGETS = tuple(name for name, _runtime_name, _lowered, generated, _has_runtime in _aboleth.transports()
                if generated)
#: The transports a kernel's statistics and lowered IR can be planned for (``aboleth compile
#: KERNEL.py --emit stats|aboleth``): the lowered ones, efa included.
PLANNED_TARGETS = tuple(name for name, _runtime_name, lowered, _generated, _has_runtime in _aboleth.transports()
                        if lowered)
#: The name of the stage inserted after ``ttir`` (also the ``kernel.asm`` key of its output).
STAGE = "aboleth"
#: The version of the builtin/stage contract (``__aboleth_v1__`` in the symbols).
BRIDGE_VERSION = "v1"

_FAST_PATH_MARKER = f'libname = "{ABOLETH_LIBNAME}"'
_PACKAGE_DIRECTORY = pathlib.Path(__file__).resolve().parent

# The Rust entry point, ``(text, options, *, source_name) -> (text, summary_json)``; a module
# attribute so that tests can substitute it.
_run_stage: Callable[..., Tuple[str, str]] = _aboleth.run_stage


@dataclasses.dataclass(frozen=True)
class Config:
    """What the aboleth stage compiles for: the transport and which passes run.

    ``disabled_passes`` is normalized to a sorted tuple without duplicates, so configurations that
    mean the same compare (and salt the cache) the same. The Rust pipeline checks the rest when
    the configuration is made (``ValueError``, through :meth:`pipeline_options`): pass names,
    ``disabled_passes`` with ``passes_off``, ``immediate_signals`` off mlx5, ``packet_signals``
    off p2p.
    """

    target: str
    passes_off: bool = False
    disabled_passes: Tuple[str, ...] = ()
    #: The program's flags are observed only through ``wait_signal``: mlx5 signals may then ride
    #: on their puts as write-with-immediate, applied by the receiving rank's waits.
    immediate_signals: bool = False
    #: A signal publishes only the put it follows, whose data is read after a wait on that
    #: signal's flag in the same launch: p2p signals may then travel in their puts' data as LL
    #: packets (flag-in-data), unpacked by the receiving rank's waits. The flag region must be
    #: declared with ``world.region(..., packet_slots=True)``.
    packet_signals: bool = False

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise ValueError(f"aboleth: target must be one of {', '.join(TARGETS)}, got {self.target!r}")
        if not isinstance(self.passes_off, bool):
            raise TypeError(f"aboleth: passes_off must be a bool, got {self.passes_off!r}")
        if not isinstance(self.immediate_signals, bool):
            raise TypeError(f"aboleth: immediate_signals must be a bool, got {self.immediate_signals!r}")
        if not isinstance(self.packet_signals, bool):
            raise TypeError(f"aboleth: packet_signals must be a bool, got {self.packet_signals!r}")
        if isinstance(self.disabled_passes, str):
            raise TypeError("aboleth: disabled_passes must be a sequence of pass names, not one string: "
                            f"{self.disabled_passes!r}")
        names = tuple(self.disabled_passes)
        for name in names:
            if not isinstance(name, str) or not name:
                raise TypeError(f"aboleth: disabled_passes must hold pass names (strings), got {name!r}")
        object.__setattr__(self, "disabled_passes", tuple(sorted(set(names))))
        # The Rust pipeline's rules (unknown passes, options that cannot take effect for the
        # target), checked where the configuration is written rather than at the first compile.
        self.pipeline_options()

    def as_dict(self) -> Dict[str, Any]:
        """The configuration's fields as a dict (what :func:`cache_salt` hashes)."""
        return {"target": self.target, "passes_off": self.passes_off, "disabled_passes": list(self.disabled_passes),
                "immediate_signals": self.immediate_signals, "packet_signals": self.packet_signals}

    def pipeline_options(self) -> "_aboleth.PipelineOptions":
        """The configuration as the Rust pipeline's options (``aboleth._aboleth.PipelineOptions``,
        the ``options`` argument of ``run_stage``); making them checks them (``ValueError``)."""
        return _aboleth.PipelineOptions(self.target, passes_off=self.passes_off,
                                        disabled_passes=list(self.disabled_passes),
                                        immediate_signals=self.immediate_signals, packet_signals=self.packet_signals)


@functools.lru_cache(maxsize=1)
def _build_digest() -> str:
    """A digest of the Rust extension module's bytes and the aboleth Python sources.

    Triton does not hash third-party builtins into its cache key (``DependenciesFinder`` skips
    them), so a change to ``aboleth.language`` or to the Rust side must reach the key through the
    salt. Computed once per process: the extension and the modules this process imported do not
    change under it (a rebuild takes effect in the next process, which computes a new digest).
    """
    digest = hashlib.sha256()
    for path in [pathlib.Path(_aboleth.__file__).resolve()] + sorted(_PACKAGE_DIRECTORY.glob("*.py")):
        digest.update(str(path).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


@functools.lru_cache(maxsize=64)
def cache_salt(config: Config) -> str:
    """The salt for ``config``: 20 hex digits of a SHA-256 over the bridge version, the Rust
    version, the build digest (extension module and Python sources) and the configuration.
    Memoized: entering ``compilation()`` around every launch costs a dictionary lookup."""
    material = json.dumps(
        {
            "bridge": BRIDGE_VERSION,
            "aboleth": _aboleth.version(),
            "build": _build_digest(),
            "config": config.as_dict(),
        },
        sort_keys=True,
    )
    return hashlib.sha256(material.encode()).hexdigest()[:20]


def _salt_of(config: Config) -> str:
    """``cache_salt(config)``, kept on the configuration object after the first call: entering a
    block around every launch then does not hash the configuration again."""
    salt = config.__dict__.get("_salt")
    if salt is None:
        salt = cache_salt(config)
        object.__setattr__(config, "_salt", salt)  # frozen dataclass; not a field
    return salt


# ---------------------------------------------------------------------------------------------
# Installation state
# ---------------------------------------------------------------------------------------------

# An absent knob override (``None`` could be a value).
_MISSING = object()


@dataclasses.dataclass
class _SavedCacheDir:
    """How ``knobs.cache.dir`` was set before installation, to restore it exactly."""

    base: str
    had_override: bool
    override: Any
    # Without an override, ``base`` comes from the environment and the home knob: what
    # ``_environment_key()`` read then, so that a later change is seen.
    environment_key: Tuple[Any, ...] = ()

    @classmethod
    def capture(cls, ignoring: Any = _MISSING) -> "_SavedCacheDir":
        """The cache directory state now; ``ignoring``: an override of ours, read as absent."""
        overrides = vars(knobs.cache)
        ours = ignoring is not _MISSING and overrides.get("dir", _MISSING) == ignoring
        if ours:
            del overrides["dir"]
        try:
            had_override = "dir" in overrides
            return cls(base=knobs.cache.dir, had_override=had_override, override=overrides.get("dir"),
                       environment_key=() if had_override else _environment_key())
        finally:
            if ours:
                overrides["dir"] = ignoring

    def environment_moved(self) -> bool:
        """Whether ``base`` came from the environment and the environment changed since."""
        return not self.had_override and _environment_key() != self.environment_key

    def restore(self) -> None:
        if self.had_override:
            _set_cache_directory(self.override)
        else:
            vars(knobs.cache).pop("dir", None)


# CPython's bytes-keyed dictionary behind ``os.environ`` (kept in step by its ``__setitem__``):
# a lookup there costs a tenth of ``os.environ.get``, which encodes the key and decodes the value.
_ENVIRON_DATA = getattr(os.environ, "_data", None) if os.name == "posix" else None


def _environment_key() -> Tuple[Any, ...]:
    """What the cache knob's default is made of: ``TRITON_CACHE_DIR``, ``TRITON_HOME`` and the
    home knob's override."""
    home = vars(knobs.cache).get("home_dir", _MISSING)
    if isinstance(_ENVIRON_DATA, dict):
        return (_ENVIRON_DATA.get(b"TRITON_CACHE_DIR"), _ENVIRON_DATA.get(b"TRITON_HOME"), home)
    return (os.environ.get("TRITON_CACHE_DIR"), os.environ.get("TRITON_HOME"), home)


def _set_cache_directory(directory: Any) -> None:
    """Sets the cache knob's override without Triton's propagation to ``os.environ`` (setting
    ``knobs.cache.dir`` would also set ``TRITON_CACHE_DIR``): the override is what Triton reads,
    in the knob's instance dictionary, where ``_SavedCacheDir.capture`` reads it."""
    vars(knobs.cache)["dir"] = directory


class _Installation:
    """One installed hook: the function placed in the knob slot, the hook it chains to, and the
    cache directory state it replaced. ``active`` turns false on uninstall; a hook that another
    tool has chained on top of stays in that chain as a plain pass-through."""

    def __init__(self, previous_hook: Optional[Callable[..., Any]], saved_cache: _SavedCacheDir) -> None:
        self.previous_hook = previous_hook
        self.saved_cache = saved_cache
        self.active = True
        self._directories: Dict[str, str] = {}

        def hook(*args: Any) -> Any:
            return self._call(args)

        hook.__qualname__ = hook.__name__ = "aboleth_stages_hook"
        self.hook = hook
        self.previous_post_compile_hook = knobs.runtime.jit_post_compile_hook

        def post_compile_hook(**kwargs: Any) -> Any:
            previous = self.previous_post_compile_hook
            result = previous(**kwargs) if previous is not None else None
            if self.active:
                _remember_stage_function(kwargs)
            return result

        post_compile_hook.__qualname__ = post_compile_hook.__name__ = "aboleth_post_compile_hook"
        self.post_compile_hook = post_compile_hook

    def cache_directory(self, salt: str) -> str:
        """The salted cache directory of ``salt`` under the directory this installation
        replaced."""
        directory = self._directories.get(salt)
        if directory is None:
            directory = self._directories[salt] = os.path.join(self.saved_cache.base, f"aboleth-{salt}")
        return directory

    def known_cache_directory(self, salt: str) -> Optional[str]:
        """The salted directory of ``salt`` if this installation made it already."""
        return self._directories.get(salt)

    def take_back_emptied_slots(self) -> None:
        """Puts the hooks back into a slot somebody emptied (``knobs.runtime.reset()``, a
        ``knobs.runtime.scope()`` entered before the installation, a tool restoring ``None``):
        without the post-compile hook, functions' caches would not follow the configuration.
        A slot holding another function is left alone (it may be a tool chained on top)."""
        if knobs.runtime.add_stages_inspection_hook is None:
            self.previous_hook = None
            knobs.runtime.add_stages_inspection_hook = self.hook
        if knobs.runtime.jit_post_compile_hook is None:
            self.previous_post_compile_hook = None
            knobs.runtime.jit_post_compile_hook = self.post_compile_hook

    def owns_cache_directory(self, directory: Any) -> bool:
        """Whether ``directory`` is one of the salted directories this installation set."""
        return directory in self._directories.values()

    def rebase(self, saved_cache: _SavedCacheDir) -> None:
        """Takes ``saved_cache`` (the directory somebody else set) as the base of the salted
        directories and as what uninstalling restores."""
        self.saved_cache = saved_cache
        self._directories.clear()

    def _call(self, args: Tuple[Any, ...]) -> Any:
        previous = self.previous_hook
        if not args:
            return self._cache_key(previous)
        result = previous(*args) if previous is not None else None
        if not self.active:
            return result
        with _lock:
            config = _config if _installation is self else None
        if config is None:
            return result
        _add_stage(args, config)
        return result

    def _cache_key(self, previous: Optional[Callable[..., Any]]) -> Tuple[str, str]:
        """Triton 3.7's zero-argument call: ``(key, hash)`` for the cache key and the JIT
        specialization, combined with the previous hook's pair."""
        with _lock:
            config = _config if (self.active and _installation is self) else None
        salt = cache_salt(config) if config is not None else "inactive"
        if previous is None:
            return ("aboleth", salt)
        previous_key, previous_hash = previous()
        combined = hashlib.sha256(f"{previous_hash}\0{salt}".encode()).hexdigest()
        return (f"{previous_key}+aboleth", combined)


_lock = threading.RLock()
# The installed hook and the configuration in force (None, None when not installed).
_installation: Optional[_Installation] = None
_config: Optional[Config] = None
# The configuration given to install(), and the active compilation() blocks in entry order.
_explicit_config: Optional[Config] = None
_contexts: List[Tuple[object, Config]] = []
# The salt whose caches every remembered function has in ``device_caches``.
_selected_salt: Optional[str] = None


# JIT functions with kernels compiled through the aboleth stage. Triton 3.6 keys a function's
# in-memory kernel cache (``JITFunction.device_caches``) by specialization and options only, so
# each of these functions keeps one set of caches per configuration (by salt), and the set in
# ``device_caches`` is the one of the configuration in force: see ``_select_kernel_caches``.
_stage_functions: "weakref.WeakSet[Any]" = weakref.WeakSet()
_CACHES_BY_SALT = "_aboleth_kernel_caches_by_salt"
_CACHES_SALT = "_aboleth_kernel_caches_salt"


def _remember_stage_function(kwargs: Dict[str, Any]) -> None:
    """Triton's ``jit_post_compile_hook``: remembers the compiled function when its kernel went
    through the aboleth stage with aboleth calls (its metadata carries the stage's summary)."""
    info = kwargs.get("fn")
    function = getattr(info, "jit_function", None)
    if function is None or function in _stage_functions:
        return
    device = (kwargs.get("compile") or {}).get("device")
    caches = function.device_caches.get(device) if device is not None else None
    kernel = caches[0].get(kwargs.get("key")) if caches else None
    metadata = getattr(kernel, "metadata", None)
    if metadata is not None and not hasattr(metadata, STAGE):
        return  # no aboleth calls: the configuration does not change its binary
    with _lock:
        config = _config
        if config is None or function in _stage_functions:
            return
        setattr(function, _CACHES_BY_SALT, {})
        setattr(function, _CACHES_SALT, cache_salt(config))
        _stage_functions.add(function)


def _select_kernel_caches(salt: str) -> None:
    """Puts in each remembered function's ``device_caches`` the caches of the configuration
    with ``salt``, keeping the others aside: a kernel launched under another configuration is
    compiled again, and coming back to a configuration finds its kernels. Holds the lock."""
    for function in list(_stage_functions):
        current = getattr(function, _CACHES_SALT, None)
        if current == salt:
            continue
        caches_by_salt = getattr(function, _CACHES_BY_SALT)
        caches_by_salt[current] = function.device_caches
        replacement = caches_by_salt.pop(salt, None)
        function.device_caches = replacement if replacement is not None else collections.defaultdict(
            function.create_binder)
        setattr(function, _CACHES_SALT, salt)


def _add_stage(args: Tuple[Any, ...], config: Config) -> None:
    """Inserts the ``aboleth`` stage right after ``ttir`` in the backend's stages dict.

    Triton 3.6 calls the hook as ``(backend, stages, options, language, capability)``. Other
    languages (Gluon starts at ``ttgir``) and pipelines without ``ttir`` are left alone.
    """
    if len(args) < 4:
        return
    stages, language = args[1], args[3]
    if language != Language.TRITON or "ttir" not in stages or STAGE in stages:
        return
    items = list(stages.items())
    stages.clear()
    for name, stage in items:
        stages[name] = stage
        if name == "ttir":
            stages[STAGE] = functools.partial(_aboleth_stage, config=config)


def _kernel_name(module: Any) -> str:
    try:
        return module.get_entry_func_name()
    except Exception:  # a module without a public entry function: any name will do
        return "kernel"


def _aboleth_stage(module: Any, metadata: Dict[str, Any], *, config: Config) -> Any:
    """The stage: fast path without aboleth calls; otherwise the Rust stage (see the module
    documentation). Does not touch ``metadata`` on the fast path."""
    text = module.str()
    if _FAST_PATH_MARKER not in text:
        return module
    new_text, summary = _run_stage(text, config.pipeline_options(), source_name=f"{_kernel_name(module)}.ttir")
    metadata["aboleth"] = summary
    if new_text == text:
        return module
    return _parse_module(new_text, module.context)


def _parse_module(text: str, context: Any) -> Any:
    """Parses TTIR text into ``context`` (which has Triton's dialects loaded); Triton 3.6 only
    parses from a file path. Raises ``RuntimeError`` if it does not parse or does not verify."""
    with tempfile.TemporaryDirectory(prefix="aboleth-ttir-") as directory:
        path = os.path.join(directory, "kernel.ttir")
        with open(path, "w", encoding="utf-8") as file:
            file.write(text)
        try:
            module = ir.parse_mlir_module(path, context)
        except Exception as error:  # Triton raises RuntimeError("Parse MLIR file failed ...")
            raise RuntimeError(f"aboleth: Triton cannot parse the TTIR returned by the aboleth stage: {error}") from error
    module.context = context
    if not module.verify():
        raise RuntimeError("aboleth: the TTIR returned by the aboleth stage does not verify")
    return module


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def _apply(remove: bool = False) -> None:
    """Makes the installed state match the configuration in force (the innermost active
    ``compilation()`` block's, else the one given to :func:`install`, else none). With no
    configuration in force the installation goes dormant (see the module documentation), or,
    with ``remove`` (:func:`uninstall`), takes itself out of the hook slots and restores the
    cache directory. Holds the lock.

    Entering and leaving a block around every launch must cost little next to a launch: with the
    installation in place (dormant or not), entering costs a memoized salt, a dictionary lookup
    of the cache directory's override and, when the salt changed, the functions' cache switch."""
    global _installation, _config, _selected_salt
    with _lock:
        config = _contexts[-1][1] if _contexts else _explicit_config
        if config is None:
            # Kernels compiled under the last configuration stay in their functions' caches, so
            # a kernel compiled inside a block can still be launched after it.
            _config = None
            installation = _installation
            if not remove or installation is None:
                return
            installation.active = False
            if knobs.runtime.add_stages_inspection_hook is installation.hook:
                knobs.runtime.add_stages_inspection_hook = installation.previous_hook
            if knobs.runtime.jit_post_compile_hook is installation.post_compile_hook:
                knobs.runtime.jit_post_compile_hook = installation.previous_post_compile_hook
            if installation.owns_cache_directory(vars(knobs.cache).get("dir", _MISSING)):
                installation.saved_cache.restore()
            _installation = None
            return
        fresh = _installation is None
        if fresh:
            installation = _Installation(knobs.runtime.add_stages_inspection_hook, _SavedCacheDir.capture())
            knobs.runtime.add_stages_inspection_hook = installation.hook
            knobs.runtime.jit_post_compile_hook = installation.post_compile_hook
            _installation = installation
        else:
            _installation.take_back_emptied_slots()
        salt = _salt_of(config)
        directory = _installation.cache_directory(salt)
        override = vars(knobs.cache).get("dir", _MISSING)
        owned = _installation.owns_cache_directory(override)
        if not fresh and owned and _installation.saved_cache.environment_moved():
            # TRITON_CACHE_DIR or TRITON_HOME changed (while dormant, or meanwhile): the
            # directory they name now is the base.
            _installation.rebase(_SavedCacheDir.capture(ignoring=override))
            directory = _installation.cache_directory(salt)
        elif not fresh and not owned and override != directory:
            # Somebody moved the cache directory (while dormant, or meanwhile): it is the
            # base from now on, and what uninstall() restores.
            _installation.rebase(_SavedCacheDir.capture())
            directory = _installation.cache_directory(salt)
        if override != directory:
            _set_cache_directory(directory)
        if config != _config:
            _config = config
            if salt != _selected_salt:
                _select_kernel_caches(salt)
                _selected_salt = salt


@functools.lru_cache(maxsize=64, typed=True)
def _make_config_cached(target: Any, passes_off: Any, disabled_passes: Tuple[Any, ...], immediate_signals: Any,
                        packet_signals: Any) -> Config:
    return Config(target=target, passes_off=passes_off, disabled_passes=disabled_passes,
                  immediate_signals=immediate_signals, packet_signals=packet_signals)


def _make_config(target: Any, passes_off: Any, disabled_passes: Any, immediate_signals: Any,
                 packet_signals: Any) -> Config:
    """``Config(...)``, memoized for the common case (hashable arguments, passes as a sequence of
    names), so that ``compilation()`` around every launch does not check the same configuration
    again. Anything else goes to ``Config`` itself, which refuses it."""
    if not isinstance(disabled_passes, str):
        disabled_passes = tuple(disabled_passes)  # once: it may be an iterator
        try:
            return _make_config_cached(target, passes_off, disabled_passes, immediate_signals, packet_signals)
        except TypeError as error:
            if "unhashable" not in str(error):
                raise
    return Config(target=target, passes_off=passes_off, disabled_passes=disabled_passes,
                  immediate_signals=immediate_signals, packet_signals=packet_signals)


def install(*, target: str, passes_off: bool = False, disabled_passes: Sequence[str] = (),
            immediate_signals: bool = False, packet_signals: bool = False) -> Config:
    """Installs the aboleth stage hook for ``target`` ("mlx5", "proxy" or "p2p"), or changes the
    configuration of the installed one. Returns the configuration.

    Chains to the hook already in ``knobs.runtime.add_stages_inspection_hook`` and points the
    cache directory at a salted subdirectory (see the module documentation). Installing twice
    does not stack hooks. An active ``compilation()`` block's configuration takes precedence
    until the block ends. Raises ``ValueError``/``TypeError`` for a bad configuration, before
    changing anything.
    """
    global _explicit_config
    config = _make_config(target, passes_off, disabled_passes, immediate_signals, packet_signals)
    cache_salt(config)  # reads the build files on first use, outside the lock
    with _lock:
        _explicit_config = config
        _apply()
    return config


def uninstall() -> bool:
    """Removes the hook and restores the cache directory, whatever installed it (this also ends
    the effect of active ``compilation()`` blocks). Returns whether it was installed (a dormant
    installation, left by ended ``compilation()`` blocks, counts).

    If another tool has since chained its own hook on top of aboleth's, the slot keeps that tool's
    hook and aboleth's becomes a pass-through to the hook it had chained to.
    """
    global _explicit_config
    with _lock:
        was_installed = _installation is not None
        _explicit_config = None
        _contexts.clear()
        _apply(remove=True)
        return was_installed


def is_dormant() -> bool:
    """Whether the hook is in its slot with no configuration in force: what ended
    ``compilation()`` blocks leave (see the module documentation); :func:`uninstall` takes it
    out and restores the cache directory."""
    with _lock:
        return _installation is not None and _config is None


def is_installed() -> bool:
    """Whether the aboleth hook is installed with a configuration in force (:func:`install`, or
    an active ``compilation()`` block); a dormant installation (see the module documentation)
    is not."""
    with _lock:
        return _installation is not None and _config is not None


def current_config() -> Optional[Config]:
    """The configuration in force, or ``None`` when not installed."""
    with _lock:
        return _config


class _CompilationBlock:
    """The context manager :func:`compilation` returns: one per configuration, made once (it is
    on the launch path of the seed's host example, which enters a block around every launch). It
    may be entered again once left, nested, and by several threads at once: each entry pushes a
    fresh ``(token, configuration)`` pair, remembered per thread and asyncio task, and its exit removes exactly
    that pair (an exit after :func:`uninstall` cleared the list removes nothing, and never
    another thread's entry)."""

    __slots__ = ("config", "_tokens")

    def __init__(self, config: Config) -> None:
        self.config = config
        # Per thread and per asyncio task (each runs in its own context): the entries it made.
        self._tokens: "contextvars.ContextVar[Tuple[Tuple[object, Config], ...]]" = contextvars.ContextVar(
            f"aboleth_compilation_{id(self)}", default=())

    def __enter__(self) -> Config:
        global _config
        config = self.config
        entry = (object(), config)
        self._tokens.set(self._tokens.get() + (entry,))
        with _lock:
            installation = _installation
            if (_config is None and not _contexts and _explicit_config is None and installation is not None
                    and _selected_salt is not None and config.__dict__.get("_salt") == _selected_salt
                    and vars(knobs.cache).get("dir", _MISSING) == installation.known_cache_directory(_selected_salt)
                    and knobs.runtime.add_stages_inspection_hook is installation.hook
                    and knobs.runtime.jit_post_compile_hook is installation.post_compile_hook
                    and not installation.saved_cache.environment_moved()):
                # Dormant as this configuration left it (its caches selected, its directory the
                # override, both hooks in their slots, the base where it was): what _apply()
                # would do comes down to putting it back in force.
                _contexts.append(entry)
                _config = config
                return config
            _contexts.append(entry)
            _apply()
        return config

    def __exit__(self, *exc_info: Any) -> None:
        global _config
        stack = self._tokens.get()
        if not stack:
            return
        entry = stack[-1]
        self._tokens.set(stack[:-1])
        with _lock:
            # uninstall() may have cleared the list already; blocks mostly end innermost first.
            for index in range(len(_contexts) - 1, -1, -1):
                if _contexts[index] is entry:
                    del _contexts[index]
                    if not _contexts and _explicit_config is None:
                        _config = None  # dormant: _apply() with no configuration in force
                    else:
                        _apply()
                    break


def compilation(*, target: str, passes_off: bool = False, disabled_passes: Sequence[str] = (),
                immediate_signals: bool = False,
                packet_signals: bool = False) -> contextlib.AbstractContextManager[Config]:
    """Kernels compiled inside the ``with`` block go through the aboleth stage for ``target``.

    While blocks are active, the most recently entered one's configuration is in force; when the
    last one ends, the configuration given to :func:`install` (if any) comes back, or the hook is
    removed. Blocks may end in any order (several threads may use them at once), but the
    configuration is process-wide: threads compiling at the same time should agree on it. The
    configuration is checked here (``ValueError``/``TypeError``), before the block is entered.
    """
    config = _make_config(target, passes_off, disabled_passes, immediate_signals, packet_signals)
    block = config.__dict__.get("_block")
    if block is None:
        _salt_of(config)  # reads the build files on first use, outside the lock
        block = _CompilationBlock(config)
        object.__setattr__(config, "_block", block)  # frozen dataclass; not a field
    return block
