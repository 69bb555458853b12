"""aboleth.moe without a GPU: the pool layout, and the communication of the low-latency mode's
kernels (python/tests/moe_rounds.py: the package's sending kernels, then the receivers' waits)
translation-validated by the simulator at 8 ranks on every transport it models, with the plan
the compiler must find (one reservation and one doorbell per peer on the queue transports)."""

import json
import pathlib
import subprocess
import sys

import pytest

from aboleth.moe.layout import LowLatencyLayout

ROUNDS = str(pathlib.Path(__file__).resolve().parent / "moe_rounds.py")
RANKS = 8
#: 16 experts (2 per rank), at most 4 tokens per rank, 64-byte rows (hidden 32, BF16).
LAYOUT = LowLatencyLayout(RANKS, 16, 4, 32)


def test_the_layout_keeps_the_configuration_independent_parts_first_and_aligned():
    parts = LAYOUT.parts()
    names = list(parts)
    assert names[:6] == ["errors", "epochs", "dispatch_flags", "combine_flags", "dispatch_counts", "send_counts"]
    assert all(offset % 256 == 0 for offset, _ in parts.values())
    other = LowLatencyLayout(RANKS, 16, 8, 4096)
    for name in names[:6]:
        assert other.parts()[name] == parts[name], name
    assert other.fingerprint != LAYOUT.fingerprint
    assert LAYOUT.pool_bytes >= parts["combine_send"][0] + parts["combine_send"][1]


@pytest.mark.parametrize("arguments, message", [
    ((1, 16, 4, 32), "at least 2 ranks"),
    ((8, 12, 4, 32), "multiple of the number of ranks"),
    ((8, 16, 0, 32), "max_tokens must be a positive integer"),
])
def test_bad_configurations_name_the_setting(arguments, message):
    with pytest.raises(ValueError, match=message):
        LowLatencyLayout(*arguments)


def simulate(kernel: str, target: str, parts: int, *extra: str) -> subprocess.CompletedProcess:
    offsets = LAYOUT.parts()
    constexprs = {"RANKS": RANKS, "LOCAL_EXPERTS": LAYOUT.local_experts, "MAX_TOKENS": LAYOUT.max_tokens,
                  "TOKEN_BYTES": LAYOUT.token_bytes, "PARTS": parts}
    if kernel == "dispatch_round":
        signature = "endpoints=*i64,regions=*i64,pool=*u8,pool_key=i32,epoch=i64"
        for name in ("dispatch_flags", "dispatch_counts", "send_counts", "dispatch_tokens", "dispatch_send"):
            constexprs[name.upper()] = offsets[name][0]
        regions = f"pool={LAYOUT.pool_bytes}"
        bind = "endpoints=endpoints regions=regions:pool pool=local:pool pool_key=lkey:pool epoch=value:epoch"
        # Counts in [0, max_tokens]; flags and counts rows start at zero.
        init = f"pool=random_mod:{LAYOUT.max_tokens + 1} pool[0:{offsets['send_counts'][0]}]=zero"
    else:
        signature = "endpoints=*i64,regions=*i64,pool=*u8,pool_key=i32,layout_range=*i64,epoch=i64"
        for name in ("combine_flags", "combine_tokens", "combine_send"):
            constexprs[name.upper()] = offsets[name][0]
        regions = f"pool={LAYOUT.pool_bytes} layout={LAYOUT.local_experts * RANKS * 8}"
        bind = ("endpoints=endpoints regions=regions:pool pool=local:pool pool_key=lkey:pool "
                "layout_range=local:layout epoch=value:epoch")
        # layout_range words: offset 0, a count in [0, max_tokens].
        init = (f"pool=random pool[0:{offsets['dispatch_counts'][0]}]=zero "
                f"layout=random_mod:{LAYOUT.max_tokens + 1}")
    arguments = [sys.executable, "-m", "aboleth", "sim", ROUNDS, "--kernel", kernel, "--target", target,
                 "--ranks", str(RANKS), "--grid", f"(ranks-1)*{parts}", "--rank-constexpr", "RANK",
                 "--signature", signature, "--regions", regions, "--bind", bind, "--init", init,
                 "--rounds", "2", "--schedules", "3", "--check", "--stats", *extra]
    for name, value in constexprs.items():
        arguments += ["--constexpr", f"{name}={value}"]
    return subprocess.run(arguments, capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize("kernel, target, parts", [
    ("dispatch_round", "p2p", 2),
    ("dispatch_round", "mlx5", 1),
    ("dispatch_round", "proxy", 1),
    ("combine_round", "p2p", 2),
    ("combine_round", "proxy", 1),
])
def test_the_low_latency_mode_communication_validates_at_8_ranks(kernel, target, parts):
    result = simulate(kernel, target, parts)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(result.stdout[result.stdout.index("{"):])
    (validation,) = report["kernels"]
    assert validation["failures"] == []
    programs = (RANKS - 1) * parts * RANKS
    for round_ in validation["passes_on"]["rounds"]:
        counts = round_["counts"]
        if target == "p2p":
            continue
        # One batch per sending program: the puts of its experts, the counts row, the add.
        assert counts["reservations"] == programs, counts
        assert counts["doorbells"] == programs, counts
        assert counts["atomics"] == 0, counts  # each program owns its queue


@pytest.mark.parametrize("target", ["p2p", "proxy"])
def test_a_lowering_that_signals_before_the_data_is_caught_on_the_dispatch(target):
    result = simulate("dispatch_round", target, 1, "--mutate", "signal-before-data")
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert "data-not-visible" in result.stdout or "not visible" in result.stdout, result.stdout[-3000:]
