"""Row blocks (exactattn.blocks, exactattn.numbers.limbs, the block entry points of exactattn.numbers.bulk) and
the ``blocks`` command, in this process.  Dask runs are in tests/checks/test_blocks_dask.py.

Everything exact is compared exactly: block results against the whole-head Trace
(``share_decimals``/``output_decimals``), against the exact per-entry path, and against
``verify`` on the same floats.
"""

import json
from fractions import Fraction as F

import numpy as np
import pytest
from hypothesis import given, strategies as st

from exactattn.blocks import (Engine, certify, check_impl, check_outputs, check_scheduler,
                              random_floats)
from exactattn.call.inputs import float_ints
from exactattn.blocks.memory import BYTES_PER_PAIR, block_rows, block_spans
from exactattn.blocks.rows import (block_keep, certify_block, exact_row, exact_rows, key_span,
                                   numerators, score_top)
from exactattn.call.modifiers import Alibi, Rope
from exactattn.call.policy import Policy
from exactattn.errors import InputError
from exactattn.engines.head import Head, attend
from exactattn.numbers.limbs import mix, score_split
from exactattn.options import check_memory, memory
from exactattn.verify import Reference, verify
from exactattn.call import Call
from exactattn.testing import assert_typed_equal as typed

PLAIN = Engine("none")


def random_head(n, d, *, policy=None, **draw):
    """verify's random float inputs as the head blocks read (Call.from_floats(...).head())."""
    return Call.from_floats(*random_floats(n, d, **draw), policy=policy).head()


def run_blocks(x, rows, places=4, shares=True):
    """(shares, outputs) of every row, computed in blocks of ``rows``."""
    s, o = [], []
    for b in certify(x, places, shares=shares, rows=rows, engine=PLAIN):
        s += b.shares or []
        o += b.outputs
    return s, o


# ----------------------------------------------------------------- exact numbers
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False, width=32), min_size=1,
                max_size=12))
def test_float_ints_are_the_floats_exactly(values):
    ints, den = float_ints(np.array(values, dtype=np.float32))
    assert type(den) is int and den & (den - 1) == 0          # a power of two
    assert [F(int(n), den) for n in ints.tolist()] == [F(v) for v in values]


def test_float_ints_refuses_nan_and_keeps_huge_ranges_exact():
    with pytest.raises(InputError, match="inputs must be finite floats"):
        float_ints(np.array([1.0, np.nan]))
    ints, den = float_ints(np.array([2.0 ** 60, 2.0 ** -60]))
    typed(ints.dtype, np.dtype(object))
    typed([F(n, den) for n in ints.tolist()], [F(2 ** 60), F(1, 2 ** 60)])
    typed(float_ints(np.zeros((2, 2)))[1], 1)


@given(st.integers(1, 5), st.integers(1, 40), st.integers(0, 62), st.integers(0, 2 ** 31))
def test_score_split_and_mix_are_exact(d, bits, shift, seed):
    rng = np.random.default_rng(seed)
    top = 2 ** min(bits, 61)
    q = rng.integers(-top, top, (3, d), dtype=np.int64)
    k = rng.integers(-top, top, (4, d), dtype=np.int64)
    want = [[sum(int(a) * int(b) for a, b in zip(qi, kj)) for kj in k.tolist()]
            for qi in q.tolist()]
    split = score_split(q, k, shift)
    if split is None:
        assert (d * int(abs(q).max()) * int(abs(k).max())) >> shift >= 2 ** 60
    else:
        high, low = split
        assert high.dtype == low.dtype == np.int64
        assert ((0 <= low) & (low < 2 ** shift)).all() or shift == 0 and not low.any()
        assert [[(int(h) << shift) + int(lo) for h, lo in zip(hr, lr)]
                for hr, lr in zip(high.tolist(), low.tolist())] == want
    got = mix(q, k.T)
    assert got.dtype == object and [[int(v) for v in r] for r in got.tolist()] == want


# ----------------------------------------------------------------- blocks = the whole head
def small_head(policy, seed=3, n=11):
    rng = np.random.default_rng(seed)

    def mat(r, c):
        return [[F(int(rng.integers(-6, 7)), int(rng.integers(1, 4))) for _ in range(c)]
                for _ in range(r)]
    return Head(mat(3, 4), mat(3, 4), mat(2, 4)).with_policy(policy), mat(n, 4)


POLICIES = [Policy(), Policy(causal=True), Policy(causal=True, window=(3, 0)),
            Policy(scale="none"), Policy(scale="1/3", window=(2, 2)),
            Policy(causal=True, alignment="bottom_right"),
            Policy(causal=True, query_offset=-3, empty_row="uniform"),
            Policy(causal=True, query_offset=-3, empty_row="nan")]


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.describe()[:48])
def test_blocks_match_the_whole_head_for_every_block_size(policy):
    head, x = small_head(policy)
    trace = attend(head, x, engine="fast")
    want = (trace.share_decimals(4), trace.output_decimals(4))
    inputs = trace.call.head()
    for rows in (1, 3, 4, 11):
        assert run_blocks(inputs, rows) == want


def test_float_inputs_match_the_exact_entries_at_4_and_8_places():
    x = random_head(24, 8, seed=2, policy=Policy(causal=True, window=(6, 0)))
    keep = block_keep(x, 0, 24, 0, 24)
    row, values = exact_rows(x, 0, 0, keep)
    for places in (4, 8):
        shares, outputs = run_blocks(x, 5, places)
        assert shares == [[row(i).share(j).decimal(places) for j in range(24)]
                          for i in range(24)]
        assert outputs == [[row(i).combine(values(i, c)).decimal(places) for c in range(8)]
                           for i in range(24)]
        assert run_blocks(x, 1, places) == run_blocks(x, 24, places) == (shares, outputs)


def test_a_block_reads_only_the_keys_its_rows_see():
    x = random_head(16, 2, seed=0, policy=Policy(causal=True, window=(2, 0)))
    typed(key_span(x, 10, 13), (8, 13))
    res = certify_block(x, 10, 13, 3)
    typed(res.keys, (8, 13))
    assert res.shares[0][:8] == ["0.000"] * 8 and res.shares[0][11:] == ["0.000"] * 5
    typed(key_span(random_head(4, 2, policy=Policy(causal=True, query_offset=-9)), 0, 4),
          (0, 0))


def test_an_explicit_boolean_mask_matches_the_reference():
    keep = [[True, False, True], [False, False, False], [True, True, False]]
    p = Call([[1, 2], [0, 1], ["1/2", 3]], [[1, 0], [2, 1], [0, 1]],
                            [[1], [2], [5]], keep)
    policy = Policy(empty_row="uniform")
    ref = Reference(p.with_policy(policy))
    shares, outputs = run_blocks(p.with_policy(policy).head(), 2)
    assert outputs == [[ref.output(0, 0, i, 0).decimal(4)] for i in range(3)]
    assert shares == [[ref.share(0, 0, i, j).decimal(4) for j in range(3)] for i in range(3)]
    additive = Call([[1]], [[1]], [[1]], [[0]], mask_kind="additive")
    with pytest.raises(InputError, match="mask must be boolean for row blocks"):
        additive.head()
    with pytest.raises(InputError, match="mask must be boolean for row blocks"):
        next(certify(additive, 4, engine=PLAIN))          # a call not read through head()
    two = Call([[[1]], [[2]]], [[[3], [4]]], [[[5], [6]]])
    with pytest.raises(InputError, match=r"^call must hold one head for row blocks \(got B=1, "
                                         r"H_q=2\); pass call.head\(b, h\)$"):
        check_outputs(two, [[1.0], [1.0]], "float32", engine=PLAIN, max_ulps=1)


def test_dropout_needs_its_keep_mask_and_a_blocked_check_no_modifier():
    with pytest.raises(InputError, match="dropout needs both p and a keep-mask"):
        Call([[1]], [[1]], [[1]], policy=Policy(dropout=F(1, 2))).head()
    with pytest.raises(InputError, match="dropout needs both p and a keep-mask"):
        Call([[1]], [[1]], [[1]], dropout_keep=[[True]]).head()
    with pytest.raises(InputError, match="policy must have no rope, softcap, alibi, sink, "
                                         "dropout for a blocked check"):
        check_impl("numpy", [[1.0]], [[1.0]], [[1.0]], "float32", Policy(softcap=F(5)))


def test_a_blocked_check_refuses_its_capability_rows_fields():
    """blocks --check refuses what its row of the capability table lists (UNSUPPORTED['sdpa']):
    every score modifier set, named in order (a window with them is no longer refused first)."""
    def refusal(policy):
        with pytest.raises(InputError) as e:
            check_impl("numpy", [[1.0]], [[1.0]], [[1.0]], "float32", policy)
        return str(e.value)
    typed(refusal(Policy(window=(1, 0), softcap="2")),
          "policy must have no rope, softcap, alibi, sink, dropout for a blocked check of an "
          "implementation (got softcap); check modified calls with exactattn verify")
    typed(refusal(Policy(sink="0", softcap="2")),
          "policy must have no rope, softcap, alibi, sink, dropout for a blocked check of an "
          "implementation (got softcap, sink); check modified calls with exactattn verify")


def no_window(query, key, value, *, is_causal=False, scale=None, window=None,
              query_offset=None):
    """A kernel that takes a window and ignores it (and the causal rule): plain softmax."""
    s = (query @ np.swapaxes(key, -1, -2)) / np.float32(np.sqrt(query.shape[-1]))
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ value


@pytest.mark.parametrize("policy", [Policy(window=(2, 0)), Policy(causal=True, window=(1, 1)),
                                    Policy(causal=True, window=(3, 0), query_offset=2),
                                    Policy(causal=True, query_offset=4, empty_row="nan")],
                         ids=["window", "causal-window", "offset-window", "offset"])
def test_a_blocked_check_of_positions_gives_verify_s_verdict(policy):
    """verify hands a window and a query offset to the kernel with the call; the blocked check
    hands it the same call and judges it as verify does (it refused them, in SDPA's words):
    numpy passes both paths with the same ULPs and tolerance, a kernel that ignores the
    window (and the causal rule) fails both, for every block size."""
    q, k, v = random_floats(12, 4, seed=5)
    for kernel, passed in (("numpy", True), (no_window, False)):
        report = verify(kernel, Call.random(12, 4, seed=5).with_policy(policy), "float32",
                        probes=())
        want = report.summary()
        typed(report.passed, passed)
        for rows in (1, 5, 12):
            mine = check_impl(kernel, q, k, v, "float32", policy, rows=rows, engine=PLAIN)
            s = mine.summary()
            typed((mine.passed, mine.max_ulps), (passed, report.max_ulps))
            for key in ("count", "max_ulps", "over", "hard"):
                typed(s[key], want[key])


MODIFIED = [Policy(scale="none", softcap="2"), Policy(sink="1/2", causal=True),
            Policy(alibi=Alibi(4), head=1, causal=True, window=(2, 0)),
            Policy(rope=Rope(), causal=True), Policy(softcap="3", sink="-1", empty_row="uniform"),
            Policy(alibi=Alibi(2), sink="0", query_offset=1, causal=True, empty_row="nan"),
            Policy(dropout="1/3", softcap="4", empty_row="uniform")]


@pytest.mark.parametrize("policy", MODIFIED, ids=lambda p: p.describe()[:60])
def test_a_modified_calls_blocks_are_the_references_rows_exactly(policy):
    call = Call([[[1, 0], [2, "1/2"], [0, 1], [1, 1], ["-1", 3]]] * 2,
                [[[1, 2], [0, 1], [3, 0], ["1/2", 1], [1, 1]]] * 2,
                [[[1, 0], [2, 1], [5, 3], [0, "1/4"], [1, 1]]] * 2,
                [[True, True, False, True, True]] * 5, policy=policy,
                dropout_keep=None if policy.dropout is None else
                [[True, False, True, True, False], [False] * 5, [True] * 5, [True, True, False,
                 False, True], [False, True, True, True, True]])
    ref = Reference(call)
    for h in (0, 1):
        x = call.head(0, h)
        keep = block_keep(x, 0, 5, 0, 5)
        for i in range(5):
            row, want = exact_row(x, i, np.flatnonzero(keep[i])), ref.row(0, h, i)
            assert [row.share(j) for j in range(5)] == [want.share(j) for j in range(5)]
            _, values = exact_rows(x, 0, 0, keep)
            assert [row.combine(values(i, c)) for c in range(2)] == \
                [ref.output(0, h, i, c) for c in range(2)]
        for rows in (1, 2, 5):
            assert run_blocks(x, rows, 6) == (
                [[ref.share(0, h, i, j).decimal(6) for j in range(5)] for i in range(5)],
                [[ref.output(0, h, i, c).decimal(6) for c in range(2)] for i in range(5)])


def test_score_top_is_the_largest_visible_score_for_any_split():
    x = Call([[1], [3]], [[2], [-5]], [[0], [0]], policy=Policy(causal=True)).head()
    typed([score_top(x, 0, 1), score_top(x, 1, 2), score_top(x, 0, 2)], [2, 15, 15])
    for policy in (Policy(), Policy(causal=True, window=(4, 1))):
        x = random_head(30, 6, seed=7, policy=policy)
        keep = block_keep(x, 0, 30, 0, 30)
        (q, _), (k, _), _ = numerators(x)
        exact = [abs(sum(int(a) * int(b) for a, b in zip(q[i].tolist(), k[j].tolist())))
                 for i in range(30) for j in range(30) if keep[i, j]]
        typed(max(score_top(x, r0, min(30, r0 + 7)) for r0 in range(0, 30, 7)), max(exact))
    same = Call([[1]] * 100, [[1]] * 100, [[0]] * 100).head()     # every score a tie
    typed(score_top(same, 0, 100), 1)


def test_random_floats_are_verifys_random_inputs():
    q, k, v = random_floats(5, 3, seed=4, dtype="float64")
    p = Call.random(5, 3, seed=4)
    assert [F(a) for a in q.ravel().tolist()] == list(p.query.ravel())
    assert [F(a) for a in v.ravel().tolist()] == list(p.value.ravel())
    typed(q.dtype, np.dtype("float64"))


# ----------------------------------------------------------------- memory and engines
def test_block_rows_follow_the_budget():
    kw = dict(n_q=16384, n_k=16384, d_k=64, d_v=64)
    sizes = [block_rows(g * 2 ** 30, workers=2, shares=False, **kw) for g in (1, 2, 4, 8)]
    typed(sizes, [64, 256, 512, 1024])
    typed(block_rows(2 ** 40, n_q=100, n_k=100, d_k=4, d_v=4), 100)
    typed(block_rows(2 ** 40, n_q=100, n_k=100, d_k=4, d_v=4, workers=2), 8)   # 4 per worker
    typed(BYTES_PER_PAIR, 128)
    typed(block_spans(7, 3), [(0, 3), (3, 6), (6, 7)])
    with pytest.raises(InputError, match="memory must be at least .* on this process"):
        block_rows(2 ** 20, workers=0, **kw)


def test_memory_sizes_parse_exactly():
    typed([check_memory(t) for t in ("4GiB", "4 gb", "512MiB", "1.5K", "100")],
          [2 ** 32, 4 * 10 ** 9, 2 ** 29, 1536, 100])
    for bad in ("", "0", "4 GiBs", "-1G", "x", True, 0):
        with pytest.raises(InputError, match="memory must be a size such as 4GiB"):
            check_memory(bad)
    typed(memory()("2G"), 2 ** 31)


def test_schedulers_are_checked(monkeypatch):
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://10.1.2.3:8786")
    with pytest.raises(InputError, match="workers must come with a local cluster .*"
                                         "DASK_SCHEDULER_ADDRESS"):
        Engine(None, 2)
    typed(Engine("none").scheduler, "none")
    typed(check_scheduler("tls://a:1"), "tls://a:1")
    with pytest.raises(InputError, match="scheduler must be none, local or a Dask address"):
        check_scheduler("tcp://")
    with pytest.raises(InputError, match="workers must be a positive whole number"):
        Engine("none", 0)
    typed(PLAIN.describe(), "this process")
    typed(list(PLAIN.map(lambda d, a, b: (a, b), None, [(0, 1), (1, 3)])), [(0, 1), (1, 3)])


# ----------------------------------------------------------------- the blocked check
@pytest.mark.parametrize("policy", [Policy(), Policy(causal=True),
                                    Policy(causal=True, alignment="bottom_right",
                                           empty_row="nan")], ids=["plain", "causal", "nan"])
def test_the_blocked_check_agrees_with_verify(policy):
    n_keys = 16 if policy.alignment == "top_left" else 12
    q, k, v = random_floats(16, 4, seed=3, n_keys=n_keys)
    report = verify("numpy", (Call.random(16, 4, seed=3, n_keys=n_keys)).with_policy(policy), "float32")
    got = np.array([e.got for e in report.entries]).reshape(16, 4)
    want = report.summary()
    for rows in (1, 5, 16):
        mine = check_outputs(Call.from_floats(q, k, v, policy=policy).head(), got, "float32", rows=rows,
                             engine=PLAIN)
        typed(mine.max_ulps, report.max_ulps)
        s = mine.summary()
        for key in ("count", "max_ulps", "mean_ulps", "median_ulps", "over", "hard"):
            typed(s[key], want[key])
        assert s["max_rel"] == pytest.approx(want["max_rel"], rel=1e-6)    # to 3 digits by design
        assert mine.summary() == check_outputs(Call.from_floats(q, k, v, policy=policy).head(), got, "float32",
                                               rows=16, engine=PLAIN).summary()
    with pytest.raises(InputError, match="dtype must be one of float32, float16, bfloat16"):
        check_outputs(Call.from_floats(q, k, v, policy=policy).head(), got, "float64", engine=PLAIN)


def _sixty_ulps_off():
    """verify's random float32 call (16 x 4, seed 3) as a row-block head and as a Call, and its
    correctly rounded outputs with output (5, 2) moved 60 float32 steps up."""
    from exactattn.verify.check import verify_outputs
    q, k, v = random_floats(16, 4, seed=3)
    x = Call.from_floats(q, k, v, policy=Policy()).head()
    call = Call.random(16, 4, seed=3).rounded("float32")[0]
    exact = verify_outputs(call, np.zeros((1, 1, 16, 4)), "float32")
    bad = np.array([e.rounded for e in exact.entries], dtype=np.float32).reshape(16, 4)
    for _ in range(60):
        bad[5, 2] = np.nextafter(bad[5, 2], np.float32(np.inf))
    return x, call, bad.astype(np.float64)


def test_the_blocked_check_judges_with_verify_s_proved_bound():
    """An output 60 ULPs off (29.8 at the terms) is within what a correct float32 kernel may
    make there (331, proved): verify passes it, and so does the blocked check, for every block
    size; the old fixed rule (19 ULPs, still the fallback and what max_ulps= sets) failed it."""
    from exactattn.blocks.check import proved_block
    from exactattn.verify.check import verify_outputs
    x, call, bad = _sixty_ulps_off()
    tol = proved_block(x, 0, 16, "float32", 19)
    typed((int(tol[5, 2]), int(tol.min()), int(tol.max())), (331, 142, 470))
    typed(proved_block(x, 4, 8, "float32", 19).tolist(), tol[4:8].tolist())
    report = verify_outputs(call, bad.reshape(1, 1, 16, 4), "float32")
    typed((report.passed, report.max_ulps, report.summary()["max_ulps"]), (True, 19, 60))
    for rows in (1, 5, 16):
        mine = check_outputs(x, bad, "float32", rows=rows, engine=PLAIN)
        typed((mine.passed, mine.max_ulps, mine.found.proved, mine.summary()["over"]),
              (True, 19, (142, 470), 0))
    old = check_outputs(x, bad, "float32", rows=4, engine=PLAIN, max_ulps=19)
    typed((old.passed, old.found.proved, old.summary()["over"]), (False, None, 1))
    for not_floats in ("1/3", 2 ** 60 + 1, "1e-400"):     # no float kernel takes these inputs
        assert proved_block(Call([[not_floats]], [[1]], [[1]]).head(), 0, 1, "float32", 19) is None
    typed(proved_block(Call([["1/2"]], [[1]], [[3]]).head(), 0, 1, "float32", 19).tolist(), [[1]])


def test_the_blocked_check_reads_the_kernel_s_accumulation_as_verify_does():
    """A kernel accumulating in float64 may make a far smaller error than one accumulating in
    float32: with ``accumulation="float64"`` the output 60 ULPs off fails verify's proved
    bound, and it fails the blocked check's too (which read float32's bound whatever was
    asked, so ``verify --memory`` passed what ``verify`` failed)."""
    from exactattn.blocks.check import proved_block
    from exactattn.verify.check import verify_outputs
    x, call, bad = _sixty_ulps_off()
    tight = proved_block(x, 0, 16, "float32", 19, "float64")
    wide = proved_block(x, 0, 16, "float32", 19)
    assert int(tight.max()) < int(tight[5, 2]) + 1 <= 60 < int(wide[5, 2])
    report = verify_outputs(call, bad.reshape(1, 1, 16, 4), "float32", accumulation="float64")
    typed((report.passed, report.summary()["over"]), (False, 1))
    for rows in (1, 5, 16):
        mine = check_outputs(x, bad, "float32", rows=rows, engine=PLAIN, accumulation="float64")
        typed((mine.passed, mine.found.proved, mine.summary()["over"]),
              (False, (int(tight.min()), int(tight.max())), 1))
    with pytest.raises(InputError, match="accumulation must be one of"):
        check_outputs(x, bad, "float32", engine=PLAIN, accumulation="float8")


def test_verify_and_the_blocked_check_read_one_binary64_rule():
    """2^-1000 and 2^60 are float64s: both verify's inputs (call_floats) and the blocked check
    (proved_block) take the proved bound for them, and the same one; 2^-1023 * 3 (a bit below
    2^-1022) and 2^60 + 1 (61 bits) take the default rule in both."""
    from exactattn.blocks.check import proved_block
    from exactattn.call.inputs import call_floats
    from exactattn.verify.check import proved_tolerance
    for entry in (F(1, 2 ** 1000), 2 ** 60, F(3, 2 ** 1023), 2 ** 60 + 1):
        call = Call([[entry, 1], [1, F(1, 2)]], [[1, 0], [0, 1]], [[1], [3]])
        floats, blocked = call_floats(call), proved_block(call.head(), 0, 2, "float32", 19)
        assert (floats is None) is (blocked is None) is (entry in (F(3, 2 ** 1023), 2 ** 60 + 1))
        if floats is not None:
            typed(proved_tolerance(floats, "float32", fallback=19)[0][0, 0].tolist(),
                  blocked.tolist())


def test_a_default_rule_of_every_float64_is_the_tolerance_not_a_crash():
    """Scores of 2^80 from float64 inputs: the default rule allows every float64 (past int64),
    so no proved bound is formed from it (it raised in an int64 cast), the rule alone judges."""
    from exactattn.verify.check import verify
    r = verify("numpy", Call([[2 ** 40]], [[2 ** 40], [-2 ** 40]], [[1], [2]],
                             policy=Policy(scale="none")), "float64")
    typed((r.bound, r.max_ulps, r.passed), (None, 18437736874454810624, True))


# ----------------------------------------------------------------- the command
def test_blocks_command_streams_csv_and_json(cli):
    rc, out, err = cli("blocks", "--random", "5,3,1", "--scheduler", "none", "--digits", "3",
                       "--show", "both", "--rows", "2", "--causal")
    assert rc == 0 and err == ""
    lines = out.splitlines()
    typed(lines[0], "kind,query,1,2,3,4,5")
    typed(lines[1], "share,1,1.000,0.000,0.000,0.000,0.000")
    typed(len(lines), 11)
    x = random_head(5, 3, seed=1, policy=Policy(causal=True))
    shares, outputs = run_blocks(x, 5, 3)
    typed(lines[4].split(",")[2:], outputs[1])
    rc, out, _ = cli("blocks", "--random", "5,3,1", "--scheduler", "none", "--format", "json",
                     "--causal", "--digits", "3")
    doc = json.loads(out)
    typed([r["outputs"] for r in doc["rows"]], outputs)
    typed((doc["n_queries"], doc["engine"], doc["policy"]["causal"]), (5, "this process", True))


def test_blocks_command_checks_a_float_implementation(cli):
    rc, out, _ = cli("blocks", "--random", "12,4,0", "--check", "numpy", "--scheduler", "none",
                     "--format", "json", "--rows", "5")
    doc = json.loads(out)
    report = verify("numpy", (Call.random(12, 4, seed=0)).with_policy(Policy()), "float32")
    typed((rc, doc["passed"], doc["blocks"]), (0, True, 3))
    typed(doc["summary"]["max_ulps"], report.summary()["max_ulps"])
    typed((doc["tolerance_ulps"], len(doc["proved_ulps"])), (report.max_ulps, 2))
    rc, out, _ = cli("blocks", "--random", "12,4,0", "--check", "numpy", "--scheduler", "none")
    lo, hi = doc["proved_ulps"]
    assert f"over the proved bound ({lo} to {hi} ULPs at the terms; {report.max_ulps} where " \
           "none holds): 0, hard: 0  -> PASS" in out.splitlines()[2]
    rc, out, _ = cli("blocks", "--random", "12,4,0", "--check", "numpy", "--scheduler", "none",
                     "--max-ulps", "3")
    assert ", over 3 ULPs: " in out.splitlines()[2]


@pytest.mark.parametrize("argv, message", [
    ((), "blocks needs --spec FILE or --random N,D,SEED (got neither)"),
    (("--random", "4,2,0", "--max-ulps", "3"), "--max-ulps must come with --check IMPL"),
    (("--random", "4,2,0", "--format", "text"), "--format must be csv or json for rows"),
    (("--random", "4,2,0", "--check", "numpy", "--format", "csv"),
     "--format csv must come without --check"),
    (("--random", "4,2,0", "--scheduler", "tcp://h:1", "--workers", "2"),
     "--workers must come with a local cluster"),
    (("--random", "4,2", ), "--random must be N,D,SEED"),
    (("--random", "4,2,0", "--memory", "lots"), "--memory must be a size such as 4GiB"),
    (("--random", "4096,64,0", "--memory", "1MiB", "--scheduler", "none"),
     "memory must be at least"),
    (("--random", "4,2,0", "--window", "3"), "--window must be LEFT,RIGHT"),
    (("--random", "4,2,0", "--scheduler", "nowhere"), "--scheduler must be none, local or"),
])
def test_blocks_command_refuses_in_one_line(cli, argv, message):
    rc, out, err = cli("blocks", *argv)
    assert rc == 2 and out == ""
    assert err.startswith("exactattn: error: ") and message in err and err.count("\n") == 1


def test_blocks_command_reads_head_and_verify_specs(cli, tmp_path):
    head_spec = tmp_path / "head.json"
    head_spec.write_text(json.dumps({
        "tokens": [{"x": [1, 0]}, {"x": [0, "1/2"]}, {"x": [2, 1]}],
        "W_Q": [[1, 0], [0, 1]], "W_K": [[1, 1], [0, 1]], "W_V": [[1, 0], [0, 2]],
        "divisor": "none", "causal": True}))
    rc, out, _ = cli("blocks", "--spec", str(head_spec), "--scheduler", "none", "--show",
                     "shares", "--rows", "2")
    from exactattn.engines.spec import load
    ex = load(head_spec)
    want = attend(ex.head, ex.x, engine="fast").share_decimals(4)
    typed([line.split(",")[2:] for line in out.splitlines()[1:]], want)
    problem_spec = tmp_path / "problem.json"
    problem_spec.write_text(json.dumps({
        "query": [["1/2"], [1]], "key": [[1], [-1]], "value": [[3], [5]],
        "policy": {"scale": "none"}, "mask": {"kind": "bool_keep",
                                              "values": [[True, True], [False, True]]}}))
    rc, out, _ = cli("blocks", "--spec", str(problem_spec), "--scheduler", "none", "--digits", "6")
    p = Call([["1/2"], [1]], [[1], [-1]], [[3], [5]], [[True, True], [False, True]])
    ref = Reference(p.with_policy(Policy(scale="none")))
    typed(out.splitlines()[1:], [f"output,{i + 1},{ref.output(0, 0, i, 0).decimal(6)}"
                                 for i in range(2)])
    rc, _, err = cli("blocks", "--spec", str(head_spec), "--check", "torch")
    assert rc == 2 and "--check must come with --random or a verify spec" in err


def test_a_modified_call_s_blocked_check_asks_for_its_tolerance():
    """The blocked check's default tolerance reads plain scores only (a sink of 40 needs 50
    ULPs where it would give 11): under a score modifier it is asked for, not guessed."""
    import numpy as np
    from exactattn.blocks.check import check_outputs
    from exactattn.call.policy import Policy
    from exactattn.errors import InputError
    q = np.ones((2, 2), dtype=np.float32)
    with pytest.raises(InputError, match=r"^max_ulps must be given for a blocked check of a "
                                         r"modified call \(got none: .*exactattn verify$"):
        check_outputs(Call.from_floats(q, q, q, policy=Policy(sink="40")).head(), q, "float32")
