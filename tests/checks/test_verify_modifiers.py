"""verify under the modifiers of the call model: the handed cases (tests/data/cases), each with a
correct float function that passes and the faulty variant the case names, which fails."""

import json
import math
from fractions import Fraction as F
from pathlib import Path

import numpy as np
import pytest

from exactattn.call.policy import Policy
from exactattn.cli import main
from exactattn.errors import InputError
from exactattn.call.modifiers import Alibi, Rope
from exactattn.numbers.softmax import ExpRatio
from exactattn.verify import Reference, verify
from exactattn.call import Call
from exactattn.verify.adapter import FunctionImpl, make_call
from exactattn.testing.report import report_sections
from alibi_paper import paper_slopes

CASES = Path(__file__).parents[1] / "data" / "cases"
UNSCALED = Policy(scale="none")


def _torch_installed() -> bool:
    import importlib.util
    return importlib.util.find_spec("torch") is not None


#: the built-in float implementations checked here (torch only where it is installed)
BUILT_IN = ("numpy", "torch") if _torch_installed() else ("numpy",)


def case(name):
    return json.loads((CASES / f"{name}.json").read_text())


def softmax(s, axis=-1):
    e = np.exp(s - s.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def outputs(report):
    return [e.got for e in report.entries]


def exact_decimals(report, places=6):
    return [e.exact.decimal(places) for e in report.entries]


# ----------------------------------------------------------------------------- attention sinks
def sink_right(query, key, value, *, scale, sink):
    s = query @ key.T * scale
    s = np.concatenate([s, np.full((s.shape[0], 1), sink)], axis=1)
    return softmax(s)[:, :-1] @ value


def sink_ignored(query, key, value, *, scale, sink):
    return softmax(query @ key.T * scale) @ value


def sink_in_each_block(query, key, value, *, scale, sink):
    """Split-KV with the sink added to both blocks' normalisers (counted twice)."""
    s = query @ key.T * scale
    outs, lses = [], []
    for cols in (slice(0, 1), slice(1, 2)):
        b = np.concatenate([s[:, cols], np.full((s.shape[0], 1), sink)], axis=1)
        m = b.max(axis=1, keepdims=True)
        e = np.exp(b - m)
        outs.append(e[:, :-1] @ value[cols] / e.sum(axis=1, keepdims=True))
        lses.append(m + np.log(e.sum(axis=1, keepdims=True)))
    lse = np.logaddexp(*lses)
    return sum(np.exp(l - lse) * o for l, o in zip(lses, outs))


def test_sink_case_right_and_faulty():
    c = case("attention-sink")
    p = Call.from_scores(c["input"]["scores"], c["input"]["V"])
    pol = UNSCALED.replace(sink=F(c["input"]["sink_logit"]))
    good = verify(FunctionImpl(sink_right), p.with_policy(pol), "float64")
    assert good.passed and exact_decimals(good) == [c["expected"]["output_decimal"]]
    assert isinstance(good.entries[0].exact, ExpRatio)
    assert good.entries[0].exact.text() == "(1 + 3*exp(1))/(2 + exp(1))"
    for fn, want in ((sink_ignored, "2.462117"), (sink_in_each_block, "1.600978")):
        bad = verify(FunctionImpl(fn), p.with_policy(pol), "float64")
        assert not bad.passed and f"{outputs(bad)[0]:.6f}" == want
        assert c["faulty"]["sink ignored" if fn is sink_ignored else
                           "sink counted in each of two key blocks"].endswith(want)
    for impl in BUILT_IN:
        assert verify(impl, p.with_policy(pol), "float32").passed


# ----------------------------------------------------------------------------- ALiBi


def _alibi_fn(slopes_of):
    def fn(query, key, value, *, alibi_heads, head, alibi_form, scale=None, enable_gqa=False,
           query_offset=0):
        assert alibi_form == "relative"
        scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
        slopes = np.array(slopes_of(alibi_heads)[head:head + query.shape[-3]])
        pos = query_offset + np.arange(query.shape[-2])
        dist = -(pos[:, None] - np.arange(key.shape[-2])[None, :])
        s = query @ np.swapaxes(key, -1, -2) * scale + slopes[:, None, None] * dist
        return softmax(s) @ value
    return fn


def test_alibi_six_heads_right_and_faulty():
    c = case("alibi-six-heads")
    p = Call([[[0]]] * 6, [[[0], [0], [0]]], [[["1"], ["2"], ["4"]]])
    pol = UNSCALED.replace(alibi=Alibi(6), query_offset=2)
    good = verify(FunctionImpl(_alibi_fn(paper_slopes)), p.with_policy(pol), "float64")
    assert good.passed and exact_decimals(good) == c["expected"]["output_decimal"]
    assert all(type(e.exact.rational()) is type(None) for e in good.entries)
    power_rule = _alibi_fn(lambda h: [2 ** (-8 * k / h) for k in range(1, h + 1)])
    bad = verify(FunctionImpl(power_rule), p.with_policy(pol), "float64")
    faulty = next(iter(c["faulty"].values()))
    assert not bad.passed and [f"{x:.6f}" for x in outputs(bad)] == faulty
    assert ("alibi", "exact rational", Reference(p.with_policy(pol)).value_kinds()[1][2]) in \
        Reference(p.with_policy(pol)).value_kinds()
    for impl in BUILT_IN:
        assert verify(impl, p.with_policy(pol), "float32").passed


def test_alibi_twelve_heads_is_exact_algebraic_and_checked():
    p = Call.random(5, 4, seed=2, heads=12)
    pol = Policy(alibi=Alibi(12), causal=True)
    ref = Reference(p.with_policy(pol))
    assert ("alibi", "exact algebraic") == ref.value_kinds()[0][:2]
    slopes_given = FunctionImpl(_alibi_fn(paper_slopes))
    assert verify(slopes_given, p.with_policy(pol.replace(causal=False)), "float64").passed
    assert verify("numpy", p.with_policy(pol), "float32").passed


def test_alibi_slopes_reach_a_function_that_takes_them():
    got = {}

    def fn(query, key, value, *, alibi_slopes, scale=None):
        got["slopes"] = alibi_slopes
        return np.zeros((query.shape[0], value.shape[1]))
    call = make_call((Call.random(2, 2)).with_policy(Policy(alibi=Alibi(12), head=8)), "float32")
    FunctionImpl(fn)(call)
    assert got["slopes"].tolist() == [float(np.float32(2 ** -0.5))]     # in the call's dtype


# ----------------------------------------------------------------------------- soft-capping
def cap_then_mask(query, key, value, *, scale, softcap, attn_mask):
    s = softcap * np.tanh(query @ key.T * scale / softcap)
    return softmax(np.where(attn_mask, s, -np.inf)) @ value


def mask_then_cap(query, key, value, *, scale, softcap, attn_mask):
    s = np.where(attn_mask, query @ key.T * scale, -np.inf)
    return softmax(softcap * np.tanh(s / softcap)) @ value


def test_softcap_before_mask_right_and_faulty():
    c = case("softcap-before-mask")
    p = Call.from_scores(c["input"]["scores"], mask=c["input"]["mask_bool_keep"])
    pol = UNSCALED.replace(softcap=F(c["input"]["cap"]))
    good = verify(FunctionImpl(cap_then_mask), p.with_policy(pol), "float64")
    assert good.passed and exact_decimals(good)[:2] == c["expected"]["shares_decimal"][:2]
    assert good.entries[2].exact.rational() == F(c["expected"]["shares_decimal"][2])
    bad = verify(FunctionImpl(mask_then_cap), p.with_policy(pol), "float64")
    assert not bad.passed and [f"{x:.6f}" for x in outputs(bad)] == next(iter(c["faulty"].values()))
    kinds = dict((k, v) for k, v, _ in Reference(p.with_policy(pol)).value_kinds())
    assert kinds == {"softcap": "certified transcendental"}
    for impl in BUILT_IN:
        assert verify(impl, p.with_policy(pol), "float32").passed


def test_softcap_ties_stay_exact():
    p = Call.from_scores([["3", "3"]], ["1", "2"])
    ref = Reference(p.with_policy(UNSCALED.replace(softcap="1/2")))
    assert ref.output(0, 0, 0, 0).rational() == F(3, 2) and ref.row(0, 0, 0).certified


# ----------------------------------------------------------------------------- log-sum-exp
def with_lse(base_seen):
    def fn(query, key, value, *, scale, return_lse, attn_mask=None):
        s = query @ key.T * scale
        if attn_mask is not None:
            s = np.where(attn_mask, s, -np.inf)
        m = s.max(axis=1, keepdims=True)
        live = np.isfinite(m)
        e = np.exp(np.where(live, s - np.where(live, m, 0), -np.inf))
        den = e.sum(axis=1, keepdims=True)
        out = np.where(live, e / np.where(live, den, 1), 0) @ value
        lse = np.where(live, m + np.log(np.where(live, den, 1)), -np.inf)[:, 0]
        return out, lse / math.log(2) if base_seen == "2" else lse
    return fn


def test_logsumexp_case_and_base_confusion():
    c = case("logsumexp")
    p = Call.from_scores(c["input"]["scores"], ["1", "2", "3"])
    good = verify(FunctionImpl(with_lse("e")), p.with_policy(UNSCALED), "float64", lse="e")
    assert good.passed and good.lse_found.kept[0].exact.decimal(10) == c["expected"]["lse_decimal"]
    assert good.lse_found.kept[0].exact.text() == "log(exp(1) + exp(2) + exp(3))"
    base2 = verify(FunctionImpl(with_lse("e")), p.with_policy(UNSCALED), "float64", lse="2")
    assert not base2.passed and base2.lse_found.kept[0].status == "over"
    assert base2.lse_found.kept[0].exact.decimal(10) == c["expected"]["lse_base2_decimal"]
    assert verify(FunctionImpl(with_lse("2")), p.with_policy(UNSCALED), "float64", lse="2").passed
    assert not verify(FunctionImpl(with_lse("2")), p.with_policy(UNSCALED), "float64", lse="e").passed
    for impl in BUILT_IN:
        for base in ("e", "2"):
            assert verify(impl, p.with_policy(UNSCALED), "float32", lse=base).passed


def test_the_summary_counts_the_rows_whose_lse_fails():
    # the outputs are right and only the log-sum-exps are off (base e read as base 2): the
    # summary's lse column counts them (it showed 0 over tolerance beside result: FAIL)
    p = Call.from_scores([["1", "2", "3"], ["0", "1", "0"]], ["1", "2", "3"]).with_policy(UNSCALED)
    row = ["float64", "2", "0", "0.00", "0", "0.43", "7.46e-17", "0", "0", "5 pass"]
    for base, cell, verdict in (("e", "2 pass", "PASS"), ("2", "2 of 2 fail", "FAIL")):
        summary = report_sections([verify(FunctionImpl(with_lse("e")), p, "float64", lse=base)])[-1]
        assert summary.columns[-3:] == ["hard failures", "probes", "lse rows"]
        assert (summary.rows, summary.notes) == ([row + [cell]], [f"result: {verdict}"])

    def plain(query, key, value, *, scale):           # no --lse: no lse column
        return with_lse("e")(query, key, value, scale=scale, return_lse=True)[0]
    summary = report_sections([verify(FunctionImpl(plain), p, "float64")])[-1]
    assert (summary.columns[-1], summary.rows) == ("probes", [row])


def test_logsumexp_of_a_fully_masked_row_is_minus_infinity():
    p = Call.from_scores([["1", "2"], ["0", "0"]], ["1", "2"], mask=[[True, True], [False, False]])
    rep = verify(FunctionImpl(with_lse("e")), p.with_policy(UNSCALED), "float64", lse="e")
    assert rep.passed and rep.lse_found.kept[1].rounded == -math.inf
    assert rep.lse_found.kept[1].exact.decimal(3) == "-inf"

    def nan_lse(query, key, value, *, scale, return_lse, attn_mask):
        out, lse = with_lse("e")(query, key, value, scale=scale, return_lse=return_lse,
                                 attn_mask=attn_mask)
        return out, np.where(np.isinf(lse), np.nan, lse)
    bad = verify(FunctionImpl(nan_lse), p.with_policy(UNSCALED), "float64", lse="e")
    assert [e.status for e in bad.lse_found.kept] == ["ok", "hard"]


def test_lse_must_be_returned_when_asked():
    p = Call.from_scores([["1", "2"]], ["1", "2"])
    def no_lse(query, key, value, *, scale):
        return softmax(query @ key.T * scale) @ value
    with pytest.raises(InputError, match=r"^no_lse must return \(output, lse\) when the "
                                         r"log-sum-exp is checked \(got ndarray\)"):
        verify(FunctionImpl(no_lse, name="no_lse"), p.with_policy(UNSCALED), "float64", lse="e")


# ----------------------------------------------------------------------------- sliding windows
def _windowed(extra_before):
    def fn(query, key, value, *, scale, is_causal, window):
        left, right = window
        i, j = np.arange(query.shape[0])[:, None], np.arange(key.shape[0])[None, :]
        keep = (j >= i - left - extra_before) & (j <= i + (right or 0)) & (j <= i if is_causal
                                                                          else True)
        return softmax(np.where(keep, query @ key.T * scale, -np.inf)) @ value
    return fn


def test_sliding_window_counts_the_query_itself():
    c = case("sliding-window")
    n, w = c["input"]["length"], c["input"]["window_including_self"]
    p = Call.from_scores([["0"] * n] * n, [str(v) for v in range(1, n + 1)])
    pol = UNSCALED.replace(causal=True, window=(w - 1, 0))
    good = verify(FunctionImpl(_windowed(0)), p.with_policy(pol), "float64")
    assert good.passed
    assert [e.exact.rational() for e in good.entries] == [F(x) for x in c["expected"]["outputs"]]
    bad = verify(FunctionImpl(_windowed(1)), p.with_policy(pol), "float64")
    assert not bad.passed and outputs(bad) == [float(F(x)) for x in next(iter(c["faulty"].values()))]
    for impl in BUILT_IN:
        assert verify(impl, p.with_policy(pol), "float32").passed


def test_window_with_offset_and_bottom_right():
    p = Call.random(3, 4, seed=3, n_keys=7)
    for pol in (Policy(causal=True, alignment="bottom_right", window=(2, 0)),
                Policy(window=(1, 1), query_offset=4), Policy(window=(None, 0), query_offset=2)):
        for impl in BUILT_IN:
            assert verify(impl, p.with_policy(pol), "float32").passed, (pol, impl)


# ----------------------------------------------------------------------------- dropout
def _dropout(scale_kept):
    def fn(query, key, value, *, scale, dropout_p, dropout_mask):
        w = softmax(query @ key.T * scale)
        return (w * np.where(dropout_mask, scale_kept(dropout_p), 0)) @ value
    return fn


def test_dropout_kept_case_right_and_faulty():
    c = case("dropout-kept")
    p = Call([[0]], [[0]] * 3, [[v] for v in c["input"]["V"]],
                            dropout_keep=[c["input"]["keep"]])
    pol = UNSCALED.replace(dropout=F(c["input"]["p"]))
    good = verify(FunctionImpl(_dropout(lambda q: 1 / (1 - q))), p.with_policy(pol), "float64")
    assert good.passed and good.entries[0].exact.rational() == F(c["expected"]["output"])
    ref = good.reference
    assert [str(ref.dropped_share(0, 0, 0, j).rational()) for j in range(3)] == \
        c["expected"]["weights_after_dropout"]
    for fn, want in ((_dropout(lambda q: 1), c["faulty"]["kept shares not rescaled"]),
                     (_dropout(lambda q: 1 / q), c["faulty"]["rescaled by 1/p"])):
        bad = verify(FunctionImpl(fn), p.with_policy(pol), "float64")
        assert not bad.passed and outputs(bad) == [float(want)]
    notes = report_sections([good])[0].notes
    assert any("rows no longer sum to 1" in n for n in notes)
    for impl in BUILT_IN:
        assert verify(impl, p.with_policy(pol), "float32").passed


def test_dropout_needs_its_keep_mask_and_p_together():
    p = Call([[0]], [[0]] * 2, [[1], [2]])
    with pytest.raises(InputError, match="dropout needs both p and a keep-mask"):
        Reference(p.with_policy(Policy(dropout="1/2")))
    keep = Call([[0]], [[0]] * 2, [[1], [2]], dropout_keep=[[True, False]])
    with pytest.raises(InputError, match="a keep-mask without p"):
        Reference(keep.with_policy(Policy()))


# ----------------------------------------------------------------------------- non-finite entries
def mix_all(query, key, value, *, scale, attn_mask):
    """Faulty: masked weights are 0, and 0 * inf = NaN."""
    with np.errstate(invalid="ignore"):
        return softmax(np.where(attn_mask, query @ key.T * scale, -np.inf)) @ value


def test_masked_nonfinite_is_ignored_exactly():
    c = case("masked-nonfinite")
    p = Call.from_scores(c["input"]["scores_before_mask"], c["input"]["V"],
                            mask=c["input"]["mask_bool_keep"])
    ref = Reference(p.with_policy(UNSCALED))
    assert ref.output(0, 0, 0, 0).rational() == F(c["expected"]["output"])
    assert [s.rational() for s in ref.shares()[0]] == [F(x) for x in c["expected"]["shares"]]
    assert verify("numpy", p.with_policy(UNSCALED), "float32").passed
    bad = verify(FunctionImpl(mix_all), p.with_policy(UNSCALED), "float64")
    assert [e.status for e in bad.entries] == ["hard"] and math.isnan(outputs(bad)[0])


def test_nonfinite_key_at_a_hidden_position_and_unmasked_errors():
    p = Call([[1, 0]], [[1, 0], ["nan", "inf"]], [[1], [2]], [[True, False]])
    assert Reference(p).output(0, 0, 0, 0).rational() == 1
    assert verify("numpy", p.with_policy(Policy()), "float32").passed
    open_inf = Call.from_scores([["0", "0", "0"]], ["2", "4", "inf"])
    with pytest.raises(InputError, match=r"^value\[2\]\[0\] must be finite where a query sees "
                                         r"it \(got inf\); inf and NaN may stand only"):
        verify("numpy", open_inf.with_policy(UNSCALED), "float32")
    with pytest.raises(InputError, match=r"^query must be finite \(got 'nan'\)"):
        Call([[0, "nan"]], [[0, 0]], [[1]])
    causal = Call([[0], [0]], [[0], ["inf"]], [[1], [2]])
    with pytest.raises(InputError, match=r"key\[1\]\[0\] must be finite where a query sees it"):
        Reference(causal.with_policy(Policy(causal=True)))      # the last query sees key 1


def test_nonfinite_from_the_cli_is_one_line(tmp_path, capsys):
    spec = tmp_path / "open.json"
    spec.write_text(json.dumps({"query": [["0", "0", "0"]], "key": [["1", "0", "0"],
                                ["0", "1", "0"], ["0", "0", "1"]], "value": [["2"], ["4"], ["inf"]],
                                "policy": {"scale": "none"}}))
    rc = main(["verify", "--spec", str(spec)])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("exactattn: error: ") and "value[2][0] must be finite" in err
    masked = json.loads(spec.read_text())
    masked["mask"] = {"kind": "bool_keep", "values": [[True, True, False]]}
    spec.write_text(json.dumps(masked))
    assert main(["verify", "--spec", str(spec)]) == 0
    assert "PASS" in capsys.readouterr().out


# ----------------------------------------------------------------------------- RoPE
def test_rope_is_certified_and_both_layouts_pass():
    p = Call.random(4, 4, seed=5, n_keys=6)
    for layout in ("half", "interleaved"):
        pol = Policy(rope=Rope(F(10000), layout), causal=True, alignment="bottom_right")
        ref = Reference(p.with_policy(pol))
        assert ref.row(0, 0, 0).certified
        assert dict((k, v) for k, v, _ in ref.value_kinds()) == {"rope": "certified transcendental"}
        for impl in BUILT_IN:
            assert verify(impl, p.with_policy(pol), "float32").passed, (layout, impl)
    wrong = Policy(rope=Rope(F(10000), "half"))
    swapped = make_call(p.rounded("float32")[0].with_policy(Policy(rope=Rope(F(10000), "interleaved"))),
                        "float32")
    from exactattn.verify.impls import NumpyImpl

    class Swapped(NumpyImpl):
        def __call__(self, call):
            return super().__call__(swapped)
    assert not verify(Swapped(), p.with_policy(wrong), "float32").passed


def test_rope_reaches_a_function_as_theta_and_layout():
    seen = {}

    def fn(query, key, value, *, rope_theta, rope_layout, query_offset, scale=None):
        seen.update(theta=rope_theta, layout=rope_layout, offset=query_offset)
        return np.zeros((query.shape[0], value.shape[1]))
    FunctionImpl(fn)(make_call((Call.random(2, 2)).with_policy(Policy(rope=Rope(F(500000)),
                                                             query_offset=7)), "float32"))
    assert seen == {"theta": 500000.0, "layout": "half", "offset": 7}


def test_a_function_without_a_needed_modifier_is_refused():
    def plain(query, key, value, *, scale=None):
        return query
    with pytest.raises(InputError, match=r"plain must take softcap= for this call \(got a "
                                         r"function without it\)"):
        verify(FunctionImpl(plain), (Call.random(2, 2)).with_policy(Policy(softcap="5")), "float32")


# ----------------------------------------------------------------------------- the CLI
@pytest.fixture
def small_spec(tmp_path):
    spec = tmp_path / "small.json"
    spec.write_text(json.dumps({"query": [["1", "0"], ["0", "1"], ["1", "1"]],
                                "key": [["1", "0"], ["0", "2"], ["1", "-1"]],
                                "value": [["1"], ["2"], ["-3"]]}))
    return str(spec)


@pytest.mark.parametrize("flags, policy_text", [
    (["--sink", "0"], "sink=0"), (["--alibi", "3:symmetric"], "form: symmetric"),
    (["--softcap", "1/2"], "softcap=1/2"), (["--window", "1,none"], "window=[1, None]"),
    (["--query-offset", "2", "--alibi", "4"], "query_offset=2"),
    (["--rope", "100:interleaved"], "layout: interleaved"), (["--lse"], "log-sum-exp"),
    (["--lse", "2"], "base 2")])
def test_every_modifier_flag_reaches_the_report(capsys, small_spec, flags, policy_text):
    main(["verify", "--spec", small_spec])
    base = capsys.readouterr().out
    rc = main(["verify", "--spec", small_spec, *flags])
    out = capsys.readouterr().out
    assert rc == 0 and out != base and policy_text in out and "result: PASS" in out


@pytest.mark.parametrize("flags, start", [
    (["--softcap", "0"], "--softcap must be positive (got '0')"),
    (["--softcap", "0.5e"], "--softcap must be a rational number"),
    (["--alibi", "6:sideways"], "--alibi FORM must be one of relative, absolute, symmetric"),
    (["--alibi", "x:relative"], "--alibi must be HEADS or HEADS:FORM"),
    (["--window", "2,x"], "--window must be LEFT,RIGHT, whole numbers >= 0 or none"),
    (["--dropout", "1"], "--dropout must be a probability"),
    (["--dropout", "1/2"], "--dropout must come with a spec file that has a dropout keep-mask"),
    (["--rope", "10:spiral"], "--rope LAYOUT must be one of half, interleaved (got 'spiral')"),
    (["--rope", "-1"], "--rope THETA must be a positive number (got '-1')"),
    (["--lse", "10"], "--lse must be one of e, 2"),
    (["--alibi", "2", "--search", "2"], "--alibi must come without --search")])
def test_bad_modifier_flags_are_one_line(capsys, small_spec, flags, start):
    argv = ["verify", *(["--spec", small_spec] if "--search" not in flags else []), *flags]
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("exactattn: error: " + start), err


# ----------------------------------------------------------------------------- one composition
@pytest.mark.parametrize("policy", [
    Policy(sink="-1/2"), Policy(alibi=Alibi(12), head=7, causal=True),
    Policy(alibi=Alibi(5, "symmetric"), query_offset=1), Policy(softcap="3/2", sink="0"),
    Policy(rope=Rope(F(50), "interleaved"), query_offset=2, window=(2, 1)),
    Policy(dropout="1/3", causal=True, alignment="bottom_right"),
    Policy(softcap="1", alibi=Alibi(8, "absolute"), rope=Rope(), causal=True)],
    ids=["sink", "alibi12", "alibi5", "softcap+sink", "rope+window", "dropout", "all"])
def test_whole_head_enclosures_round_like_the_exact_rows(policy):
    """The arb_mat path (most roundings) and the exact rows (the rest) are one composition."""
    p = Call.random(3, 4, seed=7, n_keys=5, heads=2)
    keep = np.random.default_rng(3).random((1, 2, 3, 5)) > 0.3
    p = Call(p.query, p.key, p.value, dropout_keep=keep if policy.dropout else None)
    ref = Reference(p.with_policy(policy))
    rounded, balls, _ = ref.rounded_outputs("float64")
    lse, _ = ref.rounded_lse("float64", "2")
    for idx in np.ndindex(*rounded.shape):
        want = Reference.round_exact(ref.output(*idx), "float64")[0]
        assert rounded[idx] == want or (math.isnan(want) and math.isnan(rounded[idx])), idx
    for idx in np.ndindex(*lse.shape):
        exact = ref.lse(*idx, "2")
        want = -math.inf if exact.neg_inf else Reference.round_exact(exact, "float64")[0]
        assert lse[idx] == want, idx


def test_dropout_and_lse_from_the_spec_file(tmp_path, capsys):
    c = case("dropout-kept")
    spec = tmp_path / "dropout.json"
    spec.write_text(json.dumps({
        "query": [["0"]], "key": [["0"]] * 3, "value": [[v] for v in c["input"]["V"]],
        "policy": {"scale": "none", "dropout": {"p": c["input"]["p"], "keep": [c["input"]["keep"]]},
                   "lse": "2"}}))
    rc = main(["verify", "--spec", str(spec), "--dtype", "float64"])
    out = capsys.readouterr().out
    assert rc == 0 and "rows no longer sum to 1" in out and "base 2 (log2)" in out
    assert "6.00000000000e+00" in out
    rc = main(["verify", "--spec", str(spec), "--dtype", "float64", "--dropout", "1/2"])
    assert rc == 0 and "dropout=1/2" in capsys.readouterr().out



def test_dropout_reads_the_spec_files_dropout_keep(tmp_path, capsys):
    """docs/modifiers.md: ``--dropout P`` with the spec file's ``dropout_keep`` (the keep-mask
    is data of the call, as ``Call(..., dropout_keep=...)``)."""
    c = case("dropout-kept")
    doc = {"query": [["0"]], "key": [["0"]] * 3, "value": [[v] for v in c["input"]["V"]],
           "policy": {"scale": "none"}, "dropout_keep": [c["input"]["keep"]]}
    spec = tmp_path / "keep.json"
    spec.write_text(json.dumps(doc))
    rc = main(["verify", "--spec", str(spec), "--dtype", "float64", "--dropout", c["input"]["p"]])
    out = capsys.readouterr().out
    assert rc == 0 and "dropout=1/3" in out and "6.00000000000e+00" in out
    doc["policy"]["dropout"] = {"p": "1/3", "keep": [c["input"]["keep"]]}
    spec.write_text(json.dumps(doc))
    assert main(["verify", "--spec", str(spec)]) == 2
    assert capsys.readouterr().err == (f"exactattn: error: {spec}: dropout_keep must come without "
                                       "policy.dropout.keep (got both); give the keep-mask once\n")

MIDPOINT = 1 + F(1, 2 ** 24)          # halfway between 1 and the next float32


UP = str(1 + F(1, 2 ** 23))


@pytest.mark.parametrize("name, policy, keys, value, mask", [
    ("rope", Policy(scale="none", rope=Rope(), query_offset=1), [[1, -1], [0, 0], [1, 1]],
     [["1"], ["5"], [UP]], [[True, False, True]]),
    ("softcap", Policy(scale="none", softcap="5", alibi=Alibi(8), query_offset=1,
                       mask_kind="additive"), [[1, 0], [1, 0]], [["1"], [UP]], [["0", "-1/2"]]),
])
def test_verify_ends_on_a_float32_midpoint_created_by_a_tie(name, policy, keys, value, mask,
                                                             tmp_path, capsys):
    """Two tied logits (mirrored rotary keys; soft-capped scores whose ALiBi gap an offset
    cancels) average values 1 and 1 + 2^-23: the exact output is the float32 midpoint
    1 + 2^-24, rounded exactly (ties to even: 1.0) and the verdict comes at once."""
    problem = Call([[1, 0]], keys, value, mask=mask, mask_kind=policy.mask_kind)
    ref = Reference(problem.with_policy(policy))
    assert ref.output(0, 0, 0, 0).rational() == MIDPOINT
    rounded, _, _ = ref.rounded_outputs("float32")
    assert rounded[0, 0, 0, 0] == 1.0
    spec = tmp_path / f"{name}.json"
    spec.write_text(json.dumps({"dtype": "float32", "policy": policy.as_dict(),
                                "query": [["1", "0"]], "key": [[str(x) for x in k] for k in keys],
                                "value": value, "mask": {"kind": policy.mask_kind, "values": mask}}))
    assert main(["verify", "--impl", "numpy", "--spec", str(spec)]) == 0
    assert "result: PASS" in capsys.readouterr().out


class _Straddling:
    """A certified value whose enclosures never leave the float32 midpoint 1 + 2^-24."""

    class row:
        certified = True

    @staticmethod
    def rational():
        return None

    @staticmethod
    def ball(prec):
        from flint import arb, fmpq
        return arb(fmpq(MIDPOINT.numerator, MIDPOINT.denominator), arb(2) ** (-prec))


def test_an_undecidable_midpoint_counts_both_neighbours():
    from exactattn.verify.compare import judge, undecided_tie
    from exactattn.numbers.formats import round_value
    from exactattn.numbers.formats import float_format
    fmt = float_format("float32")
    f, ball = round_value(_Straddling, fmt, 64)             # ends, at the bound
    assert f in (1.0, 1 + 2 ** -23) and ball.rad() > 0
    up = 1 + 2 ** -23
    assert undecided_tie(1.0, up, ball, fmt) and undecided_tie(up, 1.0, ball, fmt)
    assert not undecided_tie(1.0, 1 + 2 ** -22, ball, fmt)          # two floats apart
    other = up if f == 1.0 else 1.0
    j = judge(other, f, ball, 1.0, fmt, lambda: _Straddling, 0)
    assert j.status == "ok" and j.undecided and j.ulps == 0
    j = judge(f, f, ball, 1.0, fmt, lambda: _Straddling, 0)
    assert j.status == "ok" and not j.undecided and j.ulps == 0
    # an exact midpoint (a point ball) is decided: ties to even, the other neighbour is 1 ULP off
    from flint import arb, fmpq
    exact = arb(fmpq(MIDPOINT.numerator, MIDPOINT.denominator))
    assert not undecided_tie(up, 1.0, exact, fmt)
    assert judge(up, 1.0, exact, 1.0, fmt, lambda: MIDPOINT, 0).status == "over"
