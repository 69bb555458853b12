"""aboleth.kv without a GPU: the host-side planning (block geometry, runs, the errors that name
the entry and the rule), and the transfer's kernel translation-validated by the simulator at 2
and 8 ranks on every transport it models (python/tests/kv_rounds.py: two layers of runs to every
peer, then every receiver's waits), with the plan the compiler must find: one reservation and
one doorbell per program and layer on the queue transports, and mutations it must catch."""

import json
import pathlib
import subprocess
import sys

import pytest

from aboleth.kv.plan import block_runs, cache_geometry

ROUNDS = str(pathlib.Path(__file__).resolve().parent / "kv_rounds.py")


def test_a_cache_geometry_follows_its_planes():
    # vLLM's FlashAttention layout: [2, num_blocks, block_size, kv_heads, head_size], bf16.
    assert cache_geometry("0", (2, 100, 16, 8, 128), 2, 2) == (100, 16 * 8 * 128 * 2)
    assert cache_geometry("0", (100, 16, 576), 2, 1) == (100, 16 * 576 * 2)
    with pytest.raises(ValueError, match=r"layer model.layers.3's cache has shape \[100, 16\].*planes=1"):
        cache_geometry("model.layers.3", (100, 16), 2, 2)
    with pytest.raises(ValueError, match="planes must be 1"):
        cache_geometry("0", (2, 4, 4), 2, 3)


def test_runs_join_consecutive_blocks_and_respect_the_longest_run():
    assert block_runs([4, 5, 6, 9, 10], [0, 1, 2, 3, 4], 16, 8, 0, 1) == [(4, 0, 3), (9, 3, 2)]
    assert block_runs([4, 5, 6, 7, 8], [0, 1, 2, 3, 4], 16, 8, 2, 1) == [(4, 0, 2), (6, 2, 2), (8, 4, 1)]
    # Not consecutive on the destination: separate runs.
    assert block_runs([1, 2], [5, 3], 16, 8, 0, 1) == [(1, 5, 1), (2, 3, 1)]
    assert block_runs([], [], 16, 8, 0, 1) == []


@pytest.mark.parametrize("sources, destinations, message", [
    ([1, 2], [3], "2 source blocks but 1 destination blocks"),
    ([16], [0], r"source_blocks\[0\] = 16 is outside this rank's cache \(16 blocks\)"),
    ([0, 1], [2, 8], r"destination_blocks\[1\] = 8 is outside rank 1's cache \(8 blocks\)"),
    ([0, 1], [2, 2], r"destination_blocks\[1\] = 2 is given twice"),
    ([-1], [0], r"source_blocks\[0\] = -1"),
])
def test_bad_block_tables_name_the_entry_and_the_rule(sources, destinations, message):
    with pytest.raises(ValueError, match=message):
        block_runs(sources, destinations, 16, 8, 0, 1)


def test_block_tables_must_be_lists_of_ids():
    with pytest.raises(TypeError, match="source_blocks must be a list"):
        block_runs(5, [0], 16, 8, 0, 1)


BLOCK_BYTES = 64
RUNS = 3  # runs per rank and peer
MAX_RUN = 2  # blocks per run: 0, 1 or 2 (random_mod:3)
SOURCE_WINDOW = 4  # runs start at one of 4 source blocks


def simulate(target: str, ranks: int, parts: int, *extra: str) -> subprocess.CompletedProcess:
    # Blocks per plane: every rank's destination window (RUNS runs of MAX_RUN blocks each),
    # then the sources.
    plane_blocks = ranks * RUNS * MAX_RUN + SOURCE_WINDOW + MAX_RUN
    plane_expression = f"(ranks*{RUNS * MAX_RUN}+{SOURCE_WINDOW + MAX_RUN})*{BLOCK_BYTES}"
    signature = ("endpoints=*i64,layer0_regions=*i64,layer1_regions=*i64,flag_regions=*i64,layer0=*bf16,layer1=*bf16,"
                 "flags=*i64,layer0_key=i32,layer1_key=i32,run_sources=*i64,run_destinations=*i64,run_blocks=*i64,"
                 "plane_bytes=i64,first_runs=i32,last_runs=i32,epoch=i64")
    regions = (f"layer0=2*{plane_expression} layer1=2*{plane_expression} flags=2*ranks*8 "
               f"sources=ranks*{RUNS * 8} destinations=ranks*{RUNS * 8} blocks=ranks*{RUNS * 8}")
    bind = ("endpoints=endpoints layer0_regions=regions:layer0 layer1_regions=regions:layer1 "
            "flag_regions=regions:flags layer0=local:layer0 layer1=local:layer1 flags=local:flags "
            "layer0_key=lkey:layer0 layer1_key=lkey:layer1 run_sources=local:sources "
            "run_destinations=local:destinations run_blocks=local:blocks "
            f"plane_bytes=value:{plane_blocks * BLOCK_BYTES} first_runs=value:{RUNS - 1} last_runs=value:1 "
            "epoch=value:epoch")
    # Destinations 0, MAX_RUN, 2 * MAX_RUN, ...: rank r's runs (at r * RUNS) never overlap
    # another rank's; lengths 0..MAX_RUN, so some runs are empty.
    init = (f"layer0=random layer1=random flags=zero sources=random_mod:{SOURCE_WINDOW} "
            f"destinations=sequence:{MAX_RUN} blocks=random_mod:{MAX_RUN + 1}")
    constexprs = {"RANKS": ranks, "RUNS": RUNS, "PLANES": 2, "BLOCK_BYTES": BLOCK_BYTES, "PARTS": parts,
                  "SOURCE_BLOCK": ranks * RUNS * MAX_RUN, "MAX_RUNS": 8}
    arguments = [sys.executable, "-m", "aboleth", "sim", ROUNDS, "--kernel", "transfer_round", "--target", target,
                 "--ranks", str(ranks), "--grid", f"(ranks-1)*{parts}", "--rank-constexpr", "RANK",
                 "--signature", signature, "--regions", regions, "--bind", bind, "--init", init,
                 "--rounds", "2", "--schedules", "3", "--check", "--stats", *extra]
    for name, value in constexprs.items():
        arguments += ["--constexpr", f"{name}={value}"]
    return subprocess.run(arguments, capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize("ranks", [2, 8])
@pytest.mark.parametrize("target", ["mlx5", "proxy", "p2p"])
@pytest.mark.parametrize("parts", [1, 2])
def test_the_transfer_is_translation_validated(target, ranks, parts):
    result = simulate(target, ranks, parts)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    report = json.loads(result.stdout)["kernels"][0]
    assert report["failures"] == []
    on = report["passes_on"]["rounds"][0]["counts"]
    off = report["passes_off"]["rounds"][0]["counts"]
    if target != "p2p":
        # One reservation and one doorbell per sending program and launch (layer 0's two chunks,
        # layer 1), for its runtime-sized loop of puts and its add; the library style rings one
        # per command.
        programs = ranks * (ranks - 1) * parts
        assert on["doorbells"] == on["reservations"] == 3 * programs, on
        assert off["doorbells"] > on["doorbells"]
    assert on["payload_bytes"] == off["payload_bytes"] > 0


@pytest.mark.parametrize("target, mutation, kind", [
    ("mlx5", "missing-fence", "nic"),
    ("proxy", "missing-fence", "proxy"),
    ("p2p", "missing-fence", "data-not-visible"),
    ("mlx5", "run-time-batch-under-reserved", "slot-collision"),
    ("proxy", "false-single-owner", "slot-collision"),
])
def test_a_broken_lowering_of_the_transfer_is_caught(target, mutation, kind):
    result = simulate(target, 2, 2, "--mutate", mutation)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    failures = json.loads(result.stdout)["kernels"][0]["failures"]
    assert any(failure["kind"] == kind for failure in failures), failures
