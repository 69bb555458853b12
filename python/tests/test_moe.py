"""aboleth.moe without a GPU: the pool layout, and the communication of the low-latency mode's
kernels of both modes (python/tests/moe_rounds.py: the package's sending kernels, then the
receivers' waits) translation-validated by the simulator at 8 ranks on every transport it
models, with the plan
the compiler must find (one reservation and one doorbell per peer on the queue transports)."""

import json
import pathlib
import subprocess
import sys

import pytest

from aboleth.moe.layout import LowLatencyLayout, NormalLayout, counters_span

ROUNDS = str(pathlib.Path(__file__).resolve().parent / "moe_rounds.py")
RANKS = 8
#: 16 experts (2 per rank), at most 4 tokens per rank, 64-byte rows (hidden 32, BF16).
LAYOUT = LowLatencyLayout(RANKS, 16, 4, 32)
#: The same with FP8 dispatch rows: hidden 256 (2 scale groups), 256 + 8 bytes per row.
LAYOUT_FP8 = LowLatencyLayout(RANKS, 16, 4, 256, element_bytes=1)
#: The normal mode: 16 experts, hidden 32 (BF16), top-2, a pool for 5 tokens per source.
NORMAL = NormalLayout(RANKS, 16, 32, 2, NormalLayout.size_hint(5, 32, RANKS, 2, 16))
#: The same with FP8 rows of hidden 128 (one scale word), for the p2p dispatch's puts of scales.
NORMAL_FP8 = NormalLayout(RANKS, 16, 128, 2, NormalLayout.size_hint(5, 128, RANKS, 2, 16, True), 1, 1)


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


def test_fp8_dispatch_rows_carry_their_scales_and_combine_rows_stay_bf16():
    bf16 = LowLatencyLayout(RANKS, 16, 4, 256)
    assert (LAYOUT_FP8.scale_groups, LAYOUT_FP8.dispatch_row_bytes, LAYOUT_FP8.combine_row_bytes) == (2, 264, 512)
    assert (bf16.scale_groups, bf16.dispatch_row_bytes, bf16.combine_row_bytes) == (0, 512, 512)
    fp8_parts, bf16_parts = LAYOUT_FP8.parts(), bf16.parts()
    assert fp8_parts["dispatch_tokens"][1] == 2 * RANKS * 4 * 264
    assert fp8_parts["dispatch_send"][1] == 16 * 4 * 264
    for name in ("combine_tokens", "combine_send"):
        assert fp8_parts[name][1] == bf16_parts[name][1], name
    # A pool sized for BF16 (the size hint) holds FP8; the receivers tell the two apart.
    assert LAYOUT_FP8.pool_bytes < bf16.pool_bytes
    assert LAYOUT_FP8.fingerprint != bf16.fingerprint


@pytest.mark.parametrize("arguments, message", [
    ((1, 16, 4, 32), "at least 2 ranks"),
    ((8, 12, 4, 32), "multiple of the number of ranks"),
    ((8, 16, 0, 32), "max_tokens must be a positive integer"),
    ((8, 16, 4, 200, 1), "a multiple of 128 for FP8"),
    ((8, 16, 4, 256, 4), "element_bytes must be 2"),
])
def test_bad_configurations_name_the_setting(arguments, message):
    with pytest.raises(ValueError, match=message):
        LowLatencyLayout(*arguments)


def test_the_normal_layout_fits_its_size_hint_and_names_a_pool_too_small():
    assert NORMAL.capacity == 5
    assert NORMAL.row_stride % 16 == 0 and NORMAL.row_stride >= 64 + 2 * 12
    parts = NORMAL.parts()
    assert all(offset % 256 == 0 for offset, _ in parts.values())
    assert parts["send"][0] + parts["send"][1] <= NORMAL.pool_bytes
    for name in ("errors", "epochs", "dispatch_flags", "combine_flags"):
        assert parts[name] == LAYOUT.parts()[name], name  # shared with the low-latency mode
    first, end = counters_span(RANKS)
    assert first == parts["epochs"][0] and end == parts["combine_flags"][0] + parts["combine_flags"][1]
    fp8 = NormalLayout(RANKS, 16, 256, 8, 1 << 20, 1, 2)
    assert fp8.dispatch_row_bytes == 256 + 8 * 12 + 2 * 4 and fp8.row_stride >= 2 * 256 + 8 * 4
    # Each phase moves rows at its own stride; a block holds capacity rows of the larger.
    assert (fp8.dispatch_stride, fp8.combine_stride) == (368, 544) and fp8.row_stride == 544
    assert fp8.block_bytes >= fp8.capacity * fp8.combine_stride
    assert fp8.fingerprint != NormalLayout(RANKS, 16, 256, 8, 1 << 20).fingerprint
    with pytest.raises(ValueError, match="holds no token row"):
        NormalLayout(RANKS, 16, 32, 2, 4096)


def test_the_normal_direct_choice_is_direct_by_default_on_p2p_and_only_there():
    from aboleth.moe.buffer import normal_direct_choice
    assert normal_direct_choice(None, "p2p") is True and normal_direct_choice(None, "proxy") is False
    assert normal_direct_choice(True, "p2p") is True and normal_direct_choice(False, "mlx5") is False
    with pytest.raises(ValueError, match="normal_direct=True needs the p2p transport .* compiles for proxy"):
        normal_direct_choice(True, "proxy")
    with pytest.raises(ValueError, match="normal_direct must be True, False or None, got 1"):
        normal_direct_choice(1, "p2p")


class FailedWaitsWorld:
    """What ``Buffer`` asks a World after a wait gave up: the failed waits' records."""

    def __init__(self, records):
        self.records = records

    def wait_failures(self):
        return self.records

    def check_waits(self):
        if self.records:
            raise RuntimeError(f"{len(self.records)} GPU wait(s) timed out or gave up")


class PoolAt:
    """A pool tensor's address, all ``_describe_wait_failures`` reads of it."""

    def __init__(self, address):
        self.address = address

    def data_ptr(self):
        return self.address


def buffer_without_a_gpu(layout, rank=1, records=()):
    """A ``Buffer`` with only the state its failure handling reads (no GPU, no World)."""
    from aboleth.moe.buffer import Buffer
    buffer = Buffer.__new__(Buffer)
    buffer.rank, buffer.group_size, buffer.parts, buffer.normal_parts = rank, RANKS, 16, 128
    buffer._layout, buffer._last_call, buffer._sending, buffer._stopped = layout, None, None, None
    buffer.pool, buffer.world = PoolAt(1 << 30), FailedWaitsWorld(list(records))
    return buffer


def test_a_call_that_raised_before_its_send_stops_the_buffer_until_restart():
    buffer = buffer_without_a_gpu(NORMAL)
    buffer._begin("normal", "dispatch", NORMAL)  # the first call: nothing to order after
    assert buffer._sending == "normal dispatch"
    buffer._sent()
    buffer._begin("normal", "combine", NORMAL)
    # The combine raised before its send (say, its kernel failed to compile): the peers' waits
    # for it give up, and every later call on this rank would wait on counters out of step.
    for _ in range(2):
        with pytest.raises(RuntimeError, match="this Buffer stopped on rank 1, after: its normal combine raised "
                                               "before it had launched every kernel that moves its epoch and "
                                               "counters .*count the wrong epoch\\)\\. Its signal counters .* "
                                               "call restart\\(\\) on this Buffer on every rank"):
            buffer._begin("normal", "dispatch", NORMAL)


def test_a_wait_that_gave_up_on_the_pool_stops_the_buffer_at_its_next_call_and_another_pools_does_not():
    parts = NORMAL.parts()
    mine = dict(flag_address=(1 << 30) + parts["dispatch_flags"][0], expected_value=2 * 128, observed_value=128,
                waited_nanoseconds=5_000_000_000)
    foreign = dict(mine, flag_address=1 << 20)
    healthy = buffer_without_a_gpu(NORMAL, records=[foreign])
    healthy._begin("normal", "dispatch", NORMAL)  # another pool's wait: this Buffer goes on
    assert healthy._stopped is None
    stopped = buffer_without_a_gpu(NORMAL, records=[foreign, mine])
    with pytest.raises(RuntimeError, match="stopped on rank 1, after: rank 1 gave up after 5000 ms waiting for rank "
                                           "0's normal dispatch of epoch 2 .* Its signal counters"):
        stopped._begin("normal", "dispatch", NORMAL)


def test_a_wait_that_gave_up_is_named_by_peer_call_epoch_and_experts():
    parts = NORMAL.parts()
    flag = (1 << 30) + parts["dispatch_flags"][0] + 8 * 3  # rank 3's dispatch counter on rank 1
    combine_flag = (1 << 30) + parts["combine_flags"][0] + 8 * 5
    record = dict(flag_address=flag, expected_value=4 * 128, observed_value=3 * 128, waited_nanoseconds=20_000_000_000)
    records = [record, dict(record, expected_value=5 * 128), dict(record, flag_address=combine_flag),
               dict(record, flag_address=1 << 20)]  # another flag of the World: not described here
    buffer = buffer_without_a_gpu(NORMAL, records=records)
    message = buffer._describe_wait_failures()
    assert message == (
        "rank 1 gave up after 20000 ms waiting for rank 3's normal dispatch of epoch 4 (the rows of its tokens "
        "routed to this rank's experts 2..3): the last that arrived whole was epoch 3 (counter 384, 128 adds per "
        "call); is rank 3 alive and calling dispatch with the same configuration?; "
        "rank 1 gave up after 20000 ms waiting for rank 5's normal combine of epoch 4 (the outputs of its experts "
        "10..11 for this rank's tokens): the last that arrived whole was epoch 3 (counter 384, 128 adds per call); "
        "is rank 5 alive and calling combine with the same configuration?")
    low_latency = buffer_without_a_gpu(LAYOUT, records=[dict(record, expected_value=2 * 16, observed_value=16)])
    assert "rank 3's low-latency dispatch of epoch 2" in low_latency._describe_wait_failures()
    assert buffer_without_a_gpu(NORMAL, records=records[3:])._describe_wait_failures() is None
    # vLLM's fault-tolerance mask: each peer once, sorted; another pool's waits name nobody.
    assert buffer.failed_peers() == [3, 5]
    assert buffer_without_a_gpu(NORMAL, records=records[3:]).failed_peers() == []
    assert buffer_without_a_gpu(None, records=records).failed_peers() == []  # before the first call


def test_deepeps_static_helpers_work_on_the_class_and_the_config_names_the_size_hint():
    from aboleth.moe import Buffer, Config
    one, other = Buffer.__new__(Buffer), Buffer.__new__(Buffer)
    default = Buffer.num_sms
    try:
        Buffer.set_num_sms(32)  # DeepEP's static form: every Buffer without its own setting
        one.set_num_sms(8)  # this Buffer only
        assert (Buffer.num_sms, one.num_sms, other.num_sms) == (32, 8, 32)
        for bad in (0, -2, 3.0, True):
            with pytest.raises(ValueError, match="set_num_sms: a positive integer, got"):
                Buffer.set_num_sms(bad)
        config = Buffer.get_dispatch_config(2)
        assert isinstance(config, Config) and config.num_sms == 32 and "not read" in repr(config)
        assert isinstance(Buffer.get_combine_config(144), Config)
    finally:
        Buffer.num_sms = default
    with pytest.raises(ValueError, match="get_combine_config: num_ranks must be a positive integer, got 0"):
        Buffer.get_combine_config(0)
    with pytest.raises(ValueError, match="pass num_nvl_bytes=Buffer.get_normal_size_hint\\(num_max_tokens_per_rank"):
        config.get_nvl_buffer_size_hint(7168 * 2, 8)
    with pytest.raises(ValueError, match="one pool .* Buffer.get_normal_size_hint"):
        config.get_rdma_buffer_size_hint(7168 * 2, 8)


def simulate(kernel: str, target: str, parts: int, *extra: str) -> subprocess.CompletedProcess:
    if kernel.startswith("normal_"):
        return simulate_normal(kernel, target, parts, *extra)
    # "dispatch_round_fp8": the dispatch of FP8 rows (their scales after the hidden state).
    layout = LAYOUT_FP8 if kernel.endswith("_fp8") else LAYOUT
    kernel = kernel.removesuffix("_fp8")
    offsets = layout.parts()
    dispatch = kernel == "dispatch_round"
    constexprs = {"RANKS": RANKS, "LOCAL_EXPERTS": layout.local_experts, "MAX_TOKENS": layout.max_tokens,
                  "TOKEN_BYTES": layout.dispatch_row_bytes if dispatch else layout.combine_row_bytes,
                  "PARTS": parts}
    if dispatch:
        signature = "endpoints=*i64,regions=*i64,pool=*u8,pool_key=i32,epoch=i64"
        for name in ("dispatch_flags", "dispatch_counts", "send_counts", "dispatch_tokens", "dispatch_send"):
            constexprs[name.upper()] = offsets[name][0]
        regions = f"pool={layout.pool_bytes}"
        bind = "endpoints=endpoints regions=regions:pool pool=local:pool pool_key=lkey:pool epoch=value:epoch"
        # Counts in [0, max_tokens]; flags and counts rows start at zero.
        init = f"pool=random_mod:{layout.max_tokens + 1} pool[0:{offsets['send_counts'][0]}]=zero"
    else:
        signature = "endpoints=*i64,regions=*i64,pool=*u8,pool_key=i32,layout_range=*i64,epoch=i64"
        for name in ("combine_flags", "combine_tokens", "combine_send"):
            constexprs[name.upper()] = offsets[name][0]
        regions = f"pool={layout.pool_bytes} layout={layout.local_experts * RANKS * 8}"
        bind = ("endpoints=endpoints regions=regions:pool pool=local:pool pool_key=lkey:pool "
                "layout_range=local:layout epoch=value:epoch")
        # layout_range words: offset 0, a count in [0, max_tokens].
        init = (f"pool=random pool[0:{offsets['dispatch_counts'][0]}]=zero "
                f"layout=random_mod:{layout.max_tokens + 1}")
    arguments = [sys.executable, "-m", "aboleth", "sim", ROUNDS, "--kernel", kernel, "--target", target,
                 "--ranks", str(RANKS), "--grid", f"(ranks-1)*{parts}", "--rank-constexpr", "RANK",
                 "--signature", signature, "--regions", regions, "--bind", bind, "--init", init,
                 "--rounds", "2", "--schedules", "3", "--check", "--stats", *extra]
    return run(arguments, constexprs)


def run(arguments: list, constexprs: dict) -> subprocess.CompletedProcess:
    for name, value in constexprs.items():
        arguments += ["--constexpr", f"{name}={value}"]
    return subprocess.run(arguments, capture_output=True, text=True, timeout=900)


def simulate_normal(kernel: str, target: str, parts: int, *extra: str) -> subprocess.CompletedProcess:
    if "_direct_" in kernel:
        return simulate_normal_direct(kernel, target, parts, *extra)
    offsets = NORMAL.parts()
    dispatch = kernel == "normal_dispatch_round"
    constexprs = {"RANKS": RANKS, "CAPACITY": NORMAL.capacity,
                  "ROW_STRIDE": NORMAL.dispatch_stride if dispatch else NORMAL.combine_stride,
                  "BLOCK_BYTES": NORMAL.block_bytes, "PARTS": parts}
    names = ["recv", "send"] + (["dispatch_flags", "dispatch_counts", "send_counts"] if dispatch else ["combine_flags"])
    for name in names:
        constexprs[name.upper()] = offsets[name][0]
    signature = "endpoints=*i64,regions=*i64,pool=*u8,pool_key=i32,epoch=i64"
    regions = f"pool={NORMAL.pool_bytes}"
    bind = "endpoints=endpoints regions=regions:pool pool=local:pool pool_key=lkey:pool epoch=value:epoch"
    if dispatch:
        constexprs["ROW_WORDS"] = NORMAL.row_words
        # The counts words (the rows a source sends) in [0, capacity]; the flags start at zero.
        init = f"pool=random_mod:{NORMAL.capacity + 1} pool[0:{offsets['send_counts'][0]}]=zero"
    else:
        # The combine sends back the rows its handle's received layout says came from each
        # source (first rows per source, then the total: words in [0, capacity], their
        # differences clamped).
        signature = "endpoints=*i64,regions=*i64,pool=*u8,pool_key=i32,recv_info=*i64,epoch=i64"
        regions += f" info={(RANKS + 1) * 8}"
        bind += " recv_info=local:info"
        init = f"pool=random pool[0:{offsets['dispatch_counts'][0]}]=zero info=random_mod:{NORMAL.capacity + 1}"
    return run_sim(kernel, target, parts, signature, regions, bind, init, constexprs, extra)


def simulate_normal_direct(kernel: str, target: str, parts: int, *extra: str) -> subprocess.CompletedProcess:
    """The p2p sending kernels, whose puts read the caller's tensors (here regions of their own:
    ``x``, ``scales``, ``ids``, ``weights``, and ``send_tokens``' token indices), at the FP8
    layout (hidden state, top-k ids and weights, one scale word per row)."""
    layout = NORMAL_FP8
    offsets = layout.parts()
    tokens, k = layout.capacity, layout.topk
    constexprs = {"RANKS": RANKS, "CAPACITY": layout.capacity, "BLOCK_BYTES": layout.block_bytes, "PARTS": parts,
                  "K": k}
    bind = ("endpoints=endpoints regions=regions:pool pool=local:pool pool_key=lkey:pool epoch=value:epoch "
            "x_words=local:x topk_weights=local:weights")
    if kernel == "normal_dispatch_direct_round":
        constexprs.update(ROW_WORDS=layout.row_words, X_WORDS=layout.x_bytes // 4, SCALE_WORDS=layout.scales,
                          ROW_STRIDE=layout.dispatch_stride, HAS_TOPK=True)
        for name in ("dispatch_flags", "dispatch_counts", "send_counts", "recv"):
            constexprs[name.upper()] = offsets[name][0]
        signature = ("endpoints=*i64,regions=*i64,x_words=*i32,scale_words=*i32,topk_idx=*i64,topk_weights=*fp32,"
                     "send_tokens=*i64,pool=*u8,pool_key=i32,tokens=i32,epoch=i64")
        regions = (f"pool={layout.pool_bytes} x={tokens * layout.x_bytes} scales={tokens * layout.scales * 4} "
                   f"ids={tokens * k * 8} weights={tokens * k * 4} send={RANKS * tokens * 8}")
        bind += f" scale_words=local:scales topk_idx=local:ids send_tokens=local:send tokens=value:{tokens}"
        # Counts in [0, capacity] (the flags start at zero), each place's token below `tokens`.
        init = (f"pool=random_mod:{layout.capacity + 1} pool[0:{offsets['send_counts'][0]}]=zero x=random "
                f"scales=random ids=random weights=random send=random_mod:{tokens}")
    else:
        constexprs.update(HIDDEN_WORDS=layout.hidden // 2, ROW_STRIDE=layout.combine_stride, HAS_WEIGHTS=True,
                          COMBINE_FLAGS=offsets["combine_flags"][0], SEND=offsets["send"][0])
        signature = ("endpoints=*i64,regions=*i64,x_words=*i32,topk_weights=*fp32,recv_info=*i64,pool=*u8,"
                     "pool_key=i32,epoch=i64")
        # The received rows: up to `capacity` per source, each source's first row below
        # ranks * capacity (the differences clamped).
        rows = RANKS * layout.capacity + layout.capacity
        regions = (f"pool={layout.pool_bytes} x={rows * layout.hidden * 2} weights={rows * k * 4} "
                   f"info={(RANKS + 1) * 8}")
        bind += " recv_info=local:info"
        init = (f"pool=random pool[0:{offsets['dispatch_counts'][0]}]=zero x=random weights=random "
                f"info=random_mod:{RANKS * layout.capacity + 1}")
    return run_sim(kernel, target, parts, signature, regions, bind, init, constexprs, extra)


def run_sim(kernel: str, target: str, parts: int, signature: str, regions: str, bind: str, init: str,
            constexprs: dict, extra: tuple) -> subprocess.CompletedProcess:
    arguments = [sys.executable, "-m", "aboleth", "sim", ROUNDS, "--kernel", kernel, "--target", target,
                 "--ranks", str(RANKS), "--grid", f"(ranks-1)*{parts}", "--rank-constexpr", "RANK",
                 "--signature", signature, "--regions", regions, "--bind", bind, "--init", init,
                 "--rounds", "2", "--schedules", "3", "--check", "--stats", *extra]
    return run(arguments, constexprs)


@pytest.mark.parametrize("kernel, target, parts", [
    ("dispatch_round", "p2p", 2),
    ("dispatch_round", "mlx5", 1),
    ("dispatch_round", "proxy", 1),
    ("dispatch_round_fp8", "p2p", 2),
    ("dispatch_round_fp8", "mlx5", 1),
    ("combine_round", "p2p", 2),
    ("combine_round", "proxy", 1),
    ("normal_dispatch_round", "p2p", 3),
    ("normal_dispatch_round", "mlx5", 1),
    ("normal_dispatch_round", "proxy", 1),
    ("normal_combine_round", "p2p", 3),
    ("normal_combine_round", "mlx5", 1),
    ("normal_combine_round", "proxy", 1),
    ("normal_dispatch_direct_round", "p2p", 3),
    ("normal_combine_direct_round", "p2p", 3),
])
def test_the_moe_communication_validates_at_8_ranks(kernel, target, parts):
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
        # One batch per sending program: its puts (per expert, or its share of the rows), the
        # counts row, the add.
        assert counts["reservations"] == programs, counts
        assert counts["doorbells"] == programs, counts
        assert counts["atomics"] == 0, counts  # each program owns its queue


@pytest.mark.parametrize("kernel, target", [("dispatch_round", "p2p"), ("dispatch_round", "proxy"),
                                            ("normal_dispatch_round", "p2p"), ("normal_combine_round", "proxy"),
                                            ("normal_dispatch_direct_round", "p2p"),
                                            ("normal_combine_direct_round", "p2p")])
def test_a_lowering_that_signals_before_the_data_is_caught(kernel, target):
    result = simulate(kernel, target, 1, "--mutate", "signal-before-data")
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert "data-not-visible" in result.stdout or "not visible" in result.stdout, result.stdout[-3000:]


@pytest.mark.parametrize("send_tokens", ["*i64", "*u8"])
def test_the_direct_dispatch_compiles_with_what_the_buffer_passes_for_no_tokens(send_tokens):
    """With no tokens the Buffer passes the pool (u8) for ``send_tokens``: the tokens loaded from
    it must still index the caller's tensors (a u8 token times the row's words did not compile:
    "Scalar 1024 is out of range for type uint8", seen on the GPU)."""
    import aboleth
    import triton
    from triton.compiler.compiler import ASTSource
    from aboleth.moe import normal_kernels
    from helpers import TARGET
    layout = NormalLayout(2, 16, 2048, 4, NormalLayout.size_hint(256, 2048, 2, 4, 16))
    parts = layout.parts()
    signature = {"endpoints": "*i64", "regions": "*i64", "x_words": "*i32", "scale_words": "*i32",
                 "topk_idx": "*i64", "topk_weights": "*fp32", "send_tokens": send_tokens, "pool": "*u8",
                 "pool_key": "i32", "tokens": "i32"}
    constexprs = {"RANK": 1, "RANKS": 2, "ROW_WORDS": layout.row_words, "CAPACITY": layout.capacity, "K": 4,
                  "X_WORDS": layout.x_bytes // 4, "SCALE_WORDS": 0, "ROW_STRIDE": layout.dispatch_stride,
                  "BLOCK_BYTES": layout.block_bytes, "PARTS": 16, "DISPATCH_FLAGS": parts["dispatch_flags"][0],
                  "DISPATCH_COUNTS": parts["dispatch_counts"][0], "SEND_COUNTS": parts["send_counts"][0],
                  "RECV": parts["recv"][0], "HAS_TOPK": True}
    signature.update({name: "constexpr" for name in constexprs})
    with aboleth.compilation(target="p2p"):
        compiled = triton.compile(ASTSource(normal_kernels.normal_dispatch_direct, signature, constexprs),
                                  target=TARGET)
    assert "st.global" in compiled.asm["ptx"]


@pytest.mark.parametrize("fp8", [False, True])
def test_the_normal_mode_copy_kernels_compile_at_deepseeks_settings(fp8):
    """The plain-Triton kernels of the normal mode (never simulated: they move data, they do
    not communicate) compiled to sm_90 at DeepEP's settings, 2 ranks, BF16 and FP8 rows."""
    from helpers import compile_kernel
    from aboleth.moe import normal_kernels
    hidden, k, experts, ranks = 7168, 8, 256, 2
    element_bytes, scales = (1, hidden // 128) if fp8 else (2, 0)
    layout = NormalLayout(ranks, experts, hidden, k, NormalLayout.size_hint(4096, hidden, ranks, k, experts, fp8),
                          element_bytes, scales)
    parts = layout.parts()
    shared = {"K": k, "K_POW2": k, "RANKS": ranks, "ROW_STRIDE": layout.dispatch_stride,
              "BLOCK_BYTES": layout.block_bytes, "RECV": parts["recv"][0]}
    copies = {"X_WORDS": layout.x_bytes // 4, "SCALE_WORDS": scales, "HAS_TOPK": True, "BLOCK_WORDS": 1024}
    kernels = [
        (normal_kernels.normal_prepare, "in_rank=*u8,positions=*i64,send_tokens=*i64,num_tokens_per_expert=*i32,"
         "pool=*u8,recv_info=*i64,tokens=i32",
         {"RANK": 1, "RANKS": ranks, "LOCAL_EXPERTS": layout.local_experts, "LOCAL_POW2": layout.local_experts,
          "ROW_WORDS": layout.row_words, "FINGERPRINT": layout.fingerprint, "EPOCHS": parts["epochs"][0],
          "SEND_COUNTS": parts["send_counts"][0], "DISPATCH_COUNTS": parts["dispatch_counts"][0],
          "INFO_WORDS": ranks + 1 + layout.local_experts + 8, "INFO_POW2": 256, "BLOCK_TOKENS": 1024}),
        (normal_kernels.normal_pack, "x_words=*i32,scale_words=*i32,topk_idx=*i64,topk_weights=*fp32,in_rank=*u8,"
         "positions=*i64,pool=*u8", {**shared, **copies, "RANK": 1, "SEND": parts["send"][0]}),
        # FP8: send_tokens as the pool stands in for it on a rank with no tokens (u8).
        (normal_kernels.normal_dispatch_receive, f"pool=*u8,recv_info=*i64,send_tokens={'*u8' if fp8 else '*i64'},"
         "x_words=*i32,"
         "scale_words=*i32,topk_idx=*i64,topk_weights=*fp32,recv_x_words=*i32,recv_scale_words=*i32,"
         "recv_topk_idx=*i64,recv_topk_weights=*fp32,tokens=i32",
         {**shared, **copies, "RANK": 1, "RANKS_POW2": ranks, "LOCAL_EXPERTS": layout.local_experts}),
        (normal_kernels.normal_combine_pack, "pool=*u8,recv_info=*i64,x_words=*i32,topk_weights=*fp32",
         {**shared, "RANK": 0, "RANKS_POW2": ranks, "HIDDEN_WORDS": hidden // 2, "HAS_WEIGHTS": True,
          "BLOCK_WORDS": 1024}),
        (normal_kernels.normal_combine_reduce, "pool=*u8,in_rank=*u8,positions=*i64,recv_info=*i64,x=*bf16,"
         "topk_weights=*fp32,out=*bf16,out_weights=*fp32,bias_0=*bf16,bias_1=*bf16",
         {**shared, "RANK": 0, "HIDDEN": hidden, "SEND": parts["send"][0], "HAS_WEIGHTS": True,
          "BIASES": 2 if fp8 else 0, "BLOCK_HIDDEN": 1024}),
    ]
    for kernel, signature, constexprs in kernels:
        types = dict(item.split("=") for item in signature.split(","))
        # The shared settings a kernel does not take (a missing one fails the compile).
        constexprs = {name: value for name, value in constexprs.items() if name in kernel.arg_names}
        compiled = compile_kernel(kernel, {**types, **{name: "constexpr" for name in constexprs}}, constexprs)
        assert compiled.asm["cubin"], kernel.__name__


def test_the_fp8_pack_quantizes_with_correctly_rounded_divisions():
    """pack_tokens_fp8 at DeepEP's low-latency settings (2 ranks, 256 experts, 128 tokens,
    hidden 7168, top-8), compiled to sm_90: its divisions must be div.rn (Triton's ``/`` is
    div.full, 2 ulp: the torch reference would differ) and its e4m3 conversion round to nearest,
    saturating."""
    import re
    from helpers import compile_kernel
    from aboleth.moe import kernels
    layout = LowLatencyLayout(2, 256, 128, 7168, element_bytes=1)
    parts = layout.parts()
    for round_scale in (False, True):
        constexprs = {"K": 8, "RANK": 1, "RANKS": 2, "LOCAL_EXPERTS": 128, "MAX_TOKENS": 128, "HIDDEN": 7168,
                      "ROW_BYTES": layout.dispatch_row_bytes, "DISPATCH_TOKENS": parts["dispatch_tokens"][0],
                      "DISPATCH_SEND": parts["dispatch_send"][0], "ROUND_SCALE": round_scale, "BLOCK_GROUPS": 8}
        signature = {"x": "*bf16", "topk_idx": "*i64", "positions": "*i64", "pool": "*u8",
                     **{name: "constexpr" for name in constexprs}}
        ptx = compile_kernel(kernels.pack_tokens_fp8, signature, constexprs).asm["ptx"]
        divisions = set(re.findall(r"\bdiv\.[a-z.]*f32", ptx))
        assert divisions == {"div.rn.f32"}, divisions
        assert "cvt.rn.satfinite.e4m3x2.f32" in ptx


@pytest.mark.parametrize("mode", ["bf16", "fp8", "fp8_ue8m0"])
def test_the_low_latency_receive_compiles_for_each_dispatch_dtype(mode):
    """dispatch_receive (waits, then the copy of rows and, for FP8, of the scales into DeepEP's
    column-major layout) through the aboleth stage to PTX at DeepEP's settings."""
    layout = LowLatencyLayout(2, 256, 128, 7168, element_bytes=2 if mode == "bf16" else 1)
    parts = layout.parts()
    groups = layout.scale_groups
    constexprs = {"RANK": 1, "RANKS": 2, "RANKS_POW2": 2, "LOCAL_EXPERTS": 128, "MAX_TOKENS": 128,
                  "X_WORDS": 7168 * layout.element_bytes // 4, "SCALE_GROUPS": groups,
                  "GROUPS_POW2": 64 if groups else 4, "UE8M0": int(mode == "fp8_ue8m0"),
                  "FINGERPRINT": layout.fingerprint, "ERRORS": parts["errors"][0], "EPOCHS": parts["epochs"][0],
                  "DISPATCH_FLAGS": parts["dispatch_flags"][0], "DISPATCH_COUNTS": parts["dispatch_counts"][0],
                  "DISPATCH_TOKENS": parts["dispatch_tokens"][0], "BLOCK_TOKENS": 16, "BLOCK_WORDS": 512,
                  "PARTS": 1}
    kernels = str(pathlib.Path(__file__).resolve().parents[1] / "aboleth" / "moe" / "kernels.py")
    arguments = [sys.executable, "-m", "aboleth", "compile", kernels, "--kernel", "dispatch_receive", "--target",
                 "p2p", "--emit", "ptx", "--signature",
                 "endpoints=*i64,pool=*u8,packed_x=*i32,packed_scales=*i32,packed_count=*i32,layout_range=*i64"]
    result = run(arguments, constexprs)
    assert result.returncode == 0, result.stderr[-3000:]
    assert ".entry dispatch_receive" in result.stdout


def test_every_kernel_the_buffer_launches_takes_the_fast_launch_path():
    """aboleth/moe/launch.py launches a cached kernel directly when the runtime parameters come
    first and none is annotated; a kernel written otherwise would silently take Triton's slower
    path, so each one the Buffer launches is checked here (the launches run on the GPU)."""
    import inspect
    import re
    from aboleth.moe import buffer, kernels, normal, normal_kernels
    from aboleth.moe.launch import Launcher
    launched, through_aboleth = set(), set()
    for module in (buffer, normal):
        source = inspect.getsource(module)
        launched |= set(re.findall(r"_launcher\((?:normal_)?kernels\.([a-z_0-9]+)\)", source))
        through_aboleth |= set(re.findall(r"_aboleth_launcher\((?:normal_)?kernels\.([a-z_0-9]+)\)", source))
    assert {"normal_prepare", "normal_dispatch_send", "dispatch_send", "combine_reduce"} <= launched
    for name in sorted(launched):
        kernel = getattr(normal_kernels, name, None) or getattr(kernels, name)
        assert Launcher(kernel).fast, name
        # A kernel that communicates (it takes the endpoint table) must compile through the
        # World's compilation block (_aboleth_launcher); a plain one must not.
        assert ("endpoints" in kernel.arg_names) == (name in through_aboleth), name
    import triton

    @triton.jit
    def interleaved(a, N: triton.language.constexpr, b):
        pass

    assert not Launcher(interleaved).fast
