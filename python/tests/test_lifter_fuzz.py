"""Triton-level fuzzing of the lifter and the stage: random valid ``@triton.jit`` kernels that use
``aboleth.language`` (seeded, so a failure names the seed that reproduces it) go through Triton's
``ttir`` stage on the CPU and then through the aboleth stage for every transport, passes on and
off. The property: the stage either compiles the kernel, and Triton parses and verifies what it
returns, or refuses it with an error located at a line of the kernel's file; it never panics,
never calls a user's kernel an internal error, and never returns TTIR that Triton rejects. Some
kernels carry a deliberate mistake (a negative byte count): those must be refused, at its line.

``ABOLETH_LIFTER_FUZZ_KERNELS`` sets how many kernels (default 24, a few seconds each).
"""

from __future__ import annotations

import json
import os
import random
import re
from typing import List

import pytest
import triton
from triton._C.libtriton import ir

import aboleth
import aboleth.hook as hook_module
from aboleth import _aboleth
from aboleth.triton_compile import _capture_ttir

KERNELS = int(os.environ.get("ABOLETH_LIFTER_FUZZ_KERNELS", "24"))

PARAMETERS = "endpoints, recv, flags, send, send_key, my_flags, epoch, count, RANK: tl.constexpr, BYTES: tl.constexpr"
SIGNATURE = {"endpoints": "*i64", "recv": "*i64", "flags": "*i64", "send": "i64", "send_key": "i32",
             "my_flags": "*i64", "epoch": "i64", "count": "i32", "RANK": "constexpr", "BYTES": "constexpr"}


class _Kernel:
    """Builds the body of one random kernel, statement by statement."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.lines: List[str] = []
        self.names = 0
        # The line (1-based, in the file) of a deliberate mistake the stage must refuse there.
        self.mistake_line = 0

    def fresh(self, stem: str) -> str:
        self.names += 1
        return f"{stem}{self.names}"

    def emit(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def size(self) -> str:
        return self.rng.choice(["BYTES", "8", "64", "BYTES // 2", "count * 8", "16 * 4"])

    def chain(self, indent: int, index: str) -> None:
        """A put (maybe predicated), its signal, a wait for the peer's, and the completions."""
        rng = self.rng
        token, signal = self.fresh("t"), self.fresh("s")
        predicate = rng.choice(["", "", f", predicate={index} < count"])
        source = rng.choice(["src", "src + 64", f"src + ({index} % 4) * 8"])
        offset = rng.choice(["RANK * BYTES", "0", f"({index} % 4) * 8"])
        size = self.size()
        if not self.mistake_line and rng.random() < 0.1:
            size = "-8"  # a user's mistake: a negative byte count
            self.mistake_line = len(HEADER) + 1 + len(self.lines) + 1  # after the header and the def
        self.emit(indent, f"{token} = aboleth.put(ep, dst.at({offset}), {source}, {size}, "
                          f"source_key=send_key{predicate})")
        operation = rng.choice(["set", "add"])
        value = "epoch" if operation == "set" else "1"
        self.emit(indent, f"{signal} = aboleth.signal(ep, flag.at(RANK), {value}, op=\"{operation}\", "
                          f"after={token})")
        if rng.random() < 0.7:
            self.emit(indent, "aboleth.wait_signal(my_flags + peer, epoch)")
        self.emit(indent, f"aboleth.wait({signal})" if rng.random() < 0.8 else "aboleth.drain(ep)")
        if rng.random() < 0.2:
            self.emit(indent, "aboleth.fence(ep)")

    def body(self, indent: int, depth: int) -> None:
        rng = self.rng
        for _ in range(rng.randint(1, 3)):
            choice = rng.random()
            if choice < 0.45 or depth >= 2:
                self.chain(indent, rng.choice(["pid", "peer"]))
            elif choice < 0.7:
                index = self.fresh("i")
                bound = rng.choice(["4", "count", "2"])
                self.emit(indent, f"for {index} in range({bound}):")
                self.chain(indent + 1, index)
            elif choice < 0.85:
                self.emit(indent, f"if {rng.choice(['pid == 0', 'peer > RANK', 'count > 3'])}:")
                self.body(indent + 1, depth + 1)
            else:
                # Computation around the communication that the lifter leaves to Triton.
                self.emit(indent, "offsets = tl.arange(0, 64)")
                self.emit(indent, "tl.store(src + offsets, (offsets + pid).to(tl.int8))")

    def source(self, name: str) -> str:
        self.emit(1, "pid = tl.program_id(0)")
        self.emit(1, "peer = pid + (pid >= RANK).to(tl.int32)")
        self.emit(1, "ep = aboleth.endpoint(endpoints, peer)")
        self.emit(1, "dst = aboleth.remote(recv, peer)")
        self.emit(1, "flag = aboleth.remote(flags, peer, tl.int64)")
        self.emit(1, "src = send.to(tl.pointer_type(tl.int8)) + peer * BYTES")
        self.body(1, 0)
        header = HEADER + [f"def {name}({PARAMETERS}):"]
        return "\n".join(header + self.lines) + "\n"


HEADER = ["import triton", "import triton.language as tl", "import aboleth.language as aboleth", "", "",
          "@triton.jit"]
LOCATED = re.compile(r"^(aboleth: )?(?P<file>[^:\n]+\.py):(?P<line>\d+):(?P<column>\d+): error: ")


def _parse_back(text: str) -> None:
    context = ir.context()
    ir.load_dialects(context)
    triton.compiler.make_backend(triton.backends.compiler.GPUTarget("cuda", 90, 32)).load_dialects(context)
    hook_module._parse_module(text, context)


@pytest.mark.parametrize("seed", range(KERNELS))
def test_random_kernels_compile_or_are_refused_at_their_line(seed, tmp_path):
    rng = random.Random(seed)
    name = f"fuzzed_{seed}"
    path = tmp_path / f"{name}.py"
    generator = _Kernel(rng)
    path.write_text(generator.source(name))
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    constexprs = {"RANK": rng.choice([0, 1]), "BYTES": rng.choice([64, 256])}
    ttir = _capture_ttir(namespace[name], SIGNATURE, constexprs, {})
    for target in aboleth.TARGETS:
        for passes_off in (False, True):
            options = _aboleth.PipelineOptions(target, passes_off=passes_off)
            try:
                text, summary = _aboleth.run_stage(ttir, options, source_name=f"{name}.ttir")
            except ValueError as error:
                message = str(error)
                where = f"seed {seed}, {target}, passes_off={passes_off}:\n{path.read_text()}\n{message}"
                assert "internal" not in message, where
                match = LOCATED.match(message)
                assert match and match["file"] == str(path), where
                assert 1 <= int(match["line"]) <= len(path.read_text().splitlines()), where
                if generator.mistake_line:
                    assert int(match["line"]) == generator.mistake_line, where
                continue
            assert not generator.mistake_line, f"seed {seed}: the mistake at line {generator.mistake_line} passed"
            assert json.loads(summary)["aboleth_calls"] > 0
            _parse_back(text)
