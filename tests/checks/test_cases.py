"""The handed cases (tests/data/cases/*.json): each runs under its policy with its exact answer,
and the fault each describes is caught by ``verify`` for the whole kind, not only the one input.

Tolerances: the float implementations are judged by ``verify``'s own rule
(default ULP tolerance); the exact values are compared exactly or as the
certified decimals the files give.
"""

import json
import math
from fractions import Fraction as F
from pathlib import Path

import numpy as np
import pytest
import sympy
from hypothesis import assume, given, strategies as st

from exactattn.verify.impls import FunctionImpl, NumpyImpl
from exactattn.reference.online import all_splits, online_softmax
from exactattn.call.policy import Policy
from exactattn.numbers.softmax import SoftmaxRow
from exactattn.verify import Reference, verify
from exactattn.call import Call
from exactattn.testing import assert_typed_equal as typed

CASES = Path(__file__).parents[1] / "data" / "cases"
UNSCALED = Policy(scale="none")


def load(name):
    return json.loads((CASES / f"{name}.json").read_text(encoding="utf-8"))


def files():
    return sorted(p.stem for p in CASES.glob("*.json"))


def test_the_cases_are_here():
    assert set(files()) == HANDLED | MODIFIER_CASES


HANDLED = {"blockwise", "bool-mask-added", "causal-alignment", "masked-rows", "overflow",
           "softmax-axis"}
#: the cases of the call model's modifiers, checked in tests/reference/test_modifiers.py (exact values),
#: tests/engines/test_head_modifiers.py (heads and specs) and tests/checks/test_verify_modifiers.py (faulty kernels)
MODIFIER_CASES = {"alibi-six-heads", "attention-sink", "dropout-kept", "logsumexp",
                  "masked-nonfinite", "sliding-window", "softcap-before-mask"}


@pytest.mark.parametrize("name", files())
def test_every_case_file_has_a_check(name):
    assert name in HANDLED | MODIFIER_CASES, f"{name}.json has no check in the case tests"
    assert "kind" in load(name)


def _torch():
    return pytest.importorskip("torch")


# ----------------------------------------------------------------- float kernels under test

def online_kernel(block_sizes, *, guard=True):
    """A numpy float64 online-softmax kernel (FlashAttention's loop) over the given blocks.

    ``guard=False`` is the faulty kernel: the running maximum starts at -inf and
    a fully masked block computes exp(-inf - (-inf)) = NaN.
    """
    def fn(query, key, value, attn_mask=None, scale=None):
        s = (query @ key.T) * (1.0 if scale is None else scale)
        if attn_mask is not None:
            s = s + attn_mask
        out = np.zeros((s.shape[0], value.shape[1]))
        with np.errstate(all="ignore"):
            for i in range(s.shape[0]):
                m, l, acc, start = -np.inf, 0.0, np.zeros(value.shape[1]), 0
                for size in block_sizes:
                    blk = s[i, start:start + size]
                    vals = value[start:start + size]
                    start += size
                    m_new = max(m, blk.max())
                    if guard and m_new == -np.inf:   # nothing visible yet: nothing to add
                        continue
                    corr = np.exp(m - m_new)
                    p = np.exp(blk - m_new)
                    l = l * corr + p.sum()
                    acc = acc * corr + p @ vals
                    m = m_new
                out[i] = acc / l
        return out
    return FunctionImpl(fn, name=f"online {block_sizes}{'' if guard else ' unguarded'}")


def mask_added_as_numbers(query, key, value, attn_mask=None, scale=None):
    """The faulty kernel of bool-mask-added: a boolean mask added to the scores as 1/0."""
    s = (query @ key.T) * (1.0 if scale is None else scale)
    if attn_mask is not None:
        s = s + attn_mask.astype(s.dtype)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ value


def softmax_over_queries(query, key, value, scale=None):
    """The faulty kernel of softmax-axis: the softmax taken over axis -2 (the queries)."""
    s = (query @ key.T) * (1.0 if scale is None else scale)
    e = np.exp(s - s.max(axis=-2, keepdims=True))
    return (e / e.sum(axis=-2, keepdims=True)) @ value


def top_left_only(query, key, value, is_causal=False, scale=None):
    """A kernel that knows only top-left causal masks (no ``alignment`` argument)."""
    return NumpyImpl()(_call(query, key, value, is_causal, scale, "top_left"))


def bottom_right_only(query, key, value, is_causal=False, scale=None):
    return NumpyImpl()(_call(query, key, value, is_causal, scale, "bottom_right"))


def _call(query, key, value, is_causal, scale, alignment):
    from exactattn.verify.impls import FloatCall
    return FloatCall(query, key, value, "float64", Policy(
        causal=is_causal, alignment=alignment, **({} if scale is None else {"scale": F(scale)})))


# ----------------------------------------------------------------- blockwise

def test_blockwise_exact_for_the_case_and_every_split():
    case = load("blockwise")
    inp, want = case["input"], case["expected"]
    raw = [None if x == "-inf" else F(x) for x in inp["scores"][0]]
    values = [[F(v)] for v in inp["V"]]
    res = online_softmax(raw, None, values, blocks=inp["block_size"])
    assert [s.exact() for s in res.shares()] == [F(x) for x in want["shares"]]
    typed(res.outputs[0].exact(), F(want["output"]))
    for split in all_splits(len(raw)):
        res = online_softmax(raw, None, values, blocks=split)
        assert res.equals_one_pass() is True, split
        typed(res.outputs[0].exact(), F(2))


@given(st.lists(st.one_of(st.none(), st.integers(-6, 6).map(F)), min_size=1, max_size=6),
       st.data())
def test_blockwise_equals_one_pass_for_any_row_and_split(raw, data):
    splits = list(all_splits(len(raw)))
    split = data.draw(st.sampled_from(splits))
    values = [[F(j)] for j in range(len(raw))]
    res = online_softmax(raw, None, values, blocks=split)
    assert res.equals_one_pass() is True
    ref = SoftmaxRow(raw, None)
    assert res.outputs[0].numerators == ref.combine([F(j) for j in range(len(raw))]).numerators


def test_blockwise_float_kernels_every_split():
    case = load("blockwise")
    p = Call.from_scores(case["input"]["scores"], case["input"]["V"])
    for split in all_splits(4):
        good = verify(online_kernel(split), p.with_policy(UNSCALED), "float64")
        assert good.passed, split
        assert good.entries[0].rounded == 2.0
        bad = verify(online_kernel(split, guard=False), p.with_policy(UNSCALED), "float64")
        first_block_masked = split[0] <= 2
        assert bad.passed is (not first_block_masked), split
        if first_block_masked:
            assert bad.entries[0].status == "hard" and math.isnan(bad.entries[0].got)


# ----------------------------------------------------------------- bool mask added

def test_bool_mask_added_exact_and_faulty_variant():
    case = load("bool-mask-added")
    inp, want = case["input"], case["expected"]
    p = Call.from_scores(inp["scores"], mask=inp["mask"]["rows"], mask_kind=inp["mask"]["kind"])
    ref = Reference(p.with_policy(UNSCALED))
    assert [ref.share(0, 0, 0, j).exact() for j in range(2)] == [F(x) for x in want["shares"]]
    # the faulty variant's exact values: the mask added as 1/0
    faulty = Call.from_scores(inp["scores"], mask=[[1, 0]], mask_kind="additive")
    fref = Reference(faulty.with_policy(UNSCALED))
    assert [fref.share(0, 0, 0, j).decimal(6) for j in range(2)] == \
        want["faulty variant (mask added as 1/0)"]
    assert verify("numpy", p.with_policy(UNSCALED), "float32").passed
    rep = verify(FunctionImpl(mask_added_as_numbers), p.with_policy(UNSCALED), "float32")
    assert not rep.passed
    assert rep.entries[0].rounded == 1.0 and rep.entries[0].status == "over"


@given(st.integers(2, 5).flatmap(lambda n: st.tuples(
    st.lists(st.integers(-4, 4), min_size=n, max_size=n),
    st.lists(st.booleans(), min_size=n, max_size=n))))
def test_bool_mask_added_caught_for_every_mixed_mask(row):
    scores, keep = row
    assume(any(keep))                  # an empty row is masked-rows' kind
    p = Call.from_scores([scores], mask=[keep], mask_kind="bool_keep")
    assert verify("numpy", p.with_policy(UNSCALED), "float64").passed
    bad = verify(FunctionImpl(mask_added_as_numbers), p.with_policy(UNSCALED), "float64")
    assert bad.passed is all(keep)     # adding 1 to every score changes nothing


# ----------------------------------------------------------------- causal alignment

def test_causal_alignment_both_policies_and_the_wrong_one():
    case = load("causal-alignment")
    inp, want = case["input"], case["expected"]
    L, S = inp["n_queries"], inp["n_keys"]
    p = Call([[0]] * L, [[0]] * S, [[v] for v in inp["V"]])
    for alignment, key in (("top_left", "top_left outputs"), ("bottom_right", "bottom_right outputs")):
        pol = Policy(causal=True, alignment=alignment)
        ref = Reference(p.with_policy(pol))
        for i, w in enumerate(want[key]):
            typed(ref.output(0, 0, i, 0).exact(), F(w))
        assert verify("numpy", p.with_policy(pol), "float32").passed
    wrong = verify(FunctionImpl(top_left_only), p.with_policy(Policy(causal=True, alignment="bottom_right")),
                   "float32")
    assert [e.status for e in wrong.entries] == ["over", "over"]
    wrong = verify(FunctionImpl(bottom_right_only), p.with_policy(Policy(causal=True)), "float32")
    assert not wrong.passed


@given(st.integers(1, 5), st.integers(1, 5), st.sampled_from(["top_left", "bottom_right"]))
def test_causal_alignment_every_shape(L, S, alignment):
    p = Call([[0]] * L, [[0]] * S, [[j + 1] for j in range(S)])
    pol = Policy(causal=True, alignment=alignment)
    ref = Reference(p.with_policy(pol))
    offset = 0 if alignment == "top_left" else S - L
    for i in range(L):
        last = min(i + offset, S - 1)          # query i sees keys 0..last: mean of 1..last+1
        want = F(last + 2, 2) if last >= 0 else F(0)
        typed(ref.output(0, 0, i, 0).exact(), want)
    other = "bottom_right" if alignment == "top_left" else "top_left"
    fn = top_left_only if other == "top_left" else bottom_right_only
    rep = verify(FunctionImpl(fn), p.with_policy(pol), "float64")
    assert rep.passed is (L == S)      # the alignments differ in some row exactly when L != S


def test_causal_alignment_torch_folds_bottom_right_without_its_bias():
    _torch()
    from exactattn.verify.impls import TorchImpl, make_call
    p = Call([[0], [1]], [[0], [1], [2]], [[1], [2], [4]])
    call = make_call(p.with_policy(Policy(causal=True, alignment="bottom_right")), "float64")
    # lower_right_bias=False (what flop_counts uses) folds the rule into a boolean mask
    assert np.allclose(TorchImpl(lower_right_bias=False)(call), NumpyImpl()(call))
    assert np.allclose(TorchImpl()(call), NumpyImpl()(call))


# ----------------------------------------------------------------- masked rows

def test_masked_rows_empty_row_policies():
    case = load("masked-rows")
    inp = case["input"]
    first = case["cases"][0]
    p = Call.from_scores(inp["scores"], inp["V"], first["mask"]["rows"],
                            mask_kind=first["mask"]["kind"])
    want = first["expected"]
    for rule, w in want["row 1 output"].items():
        pol = UNSCALED.replace(empty_row=rule.split("=")[1])
        ref = Reference(p.with_policy(pol))
        typed(ref.output(0, 0, 0, 0).exact(), F(want["row 0 output"]))
        got = ref.output(0, 0, 1, 0)
        if w == "nan":
            assert got.row.nan is True and got.decimal(3) == "nan"
        else:
            typed(got.exact(), F(w))


def test_masked_rows_torch_gives_zero():
    _torch()
    case = load("masked-rows")
    first = case["cases"][0]
    p = Call.from_scores(case["input"]["scores"], case["input"]["V"], first["mask"]["rows"],
                            mask_kind=first["mask"]["kind"])
    # PyTorch gives zero; checked under nan or uniform it fails, and row 0 never leaks
    rep = verify("torch", p.with_policy(UNSCALED.replace(empty_row="zero")), "float32")
    assert rep.passed
    for rule in ("nan", "uniform"):
        rep = verify("torch", p.with_policy(UNSCALED.replace(empty_row=rule)), "float32")
        assert [e.status for e in rep.entries] == ["ok", "hard" if rule == "nan" else "over"]


def test_masked_rows_numpy_nan_is_a_hard_failure_under_zero():
    """The textbook kernel (numpy-naive: 0/0 on a row that sees no key) fails hard under
    empty_row=zero and passes under nan; numpy answers each policy's empty row."""
    case = load("masked-rows")
    first = case["cases"][0]
    p = Call.from_scores(case["input"]["scores"], case["input"]["V"], first["mask"]["rows"],
                            mask_kind=first["mask"]["kind"])
    rep = verify("numpy-naive", p.with_policy(UNSCALED), "float32")
    assert [e.status for e in rep.entries] == ["ok", "hard"]
    assert verify("numpy-naive", p.with_policy(UNSCALED.replace(empty_row="nan")),
                  "float32").passed
    for rule in ("zero", "nan", "uniform"):
        assert verify("numpy", p.with_policy(UNSCALED.replace(empty_row=rule)), "float32").passed


def test_masked_rows_additive_mask():
    case = load("masked-rows")
    second = case["cases"][1]
    want = second["expected"]
    p = Call.from_scores(case["input"]["scores"], case["input"]["V"], second["mask"]["rows"],
                            mask_kind="additive")
    ref = Reference(p.with_policy(UNSCALED))
    assert [ref.share(0, 0, 0, j).decimal(6) for j in range(2)] == want["row 0 shares"]
    assert ref.output(0, 0, 0, 0).decimal(6) == want["row 0 output"]
    typed(ref.output(0, 0, 1, 0).exact(), F(want["row 1 output"]))
    rep = verify("numpy", p.with_policy(UNSCALED), "float32")
    assert rep.passed and rep.moved_inputs == 1          # 0.7 is not a float32
    # the faulty reading: the additive mask taken as a boolean keep-mask
    as_bool = Call.from_scores(case["input"]["scores"], case["input"]["V"],
                                  [[True, True], [True, True]], mask_kind="bool_keep")
    assert Reference(as_bool.with_policy(UNSCALED)).output(0, 0, 0, 0).exact() == F(2)


@given(st.lists(st.booleans(), min_size=3, max_size=3), st.sampled_from(["zero", "uniform", "nan"]))
def test_empty_rows_never_leak(keep_row0, rule):
    mask = [keep_row0, [False, False, False], [True, True, True]]
    p = Call.from_scores([[1, 2, 3]] * 3, [5, 7, 11], mask, mask_kind="bool_keep")
    ref = Reference(p.with_policy(UNSCALED.replace(empty_row=rule)))
    full = SoftmaxRow([F(1), F(2), F(3)], None).combine([F(5), F(7), F(11)])
    assert ref.output(0, 0, 2, 0).numerators == full.numerators
    row0 = SoftmaxRow([F(s) if k else None for s, k in zip([1, 2, 3], keep_row0)], None, rule)
    assert ref.row(0, 0, 0).counts == row0.counts


# ----------------------------------------------------------------- overflow

def test_overflow_exact_and_naive_float32_caught():
    case = load("overflow")
    want = case["expected"]
    p = Call.from_scores(case["input"]["scores"])
    ref = Reference(p.with_policy(UNSCALED))
    e = sympy.E
    for j, w in enumerate([e / (e + 1), 1 / (e + 1)]):
        assert sympy.simplify(ref.share(0, 0, 0, j).closed_form() - w) == 0
        assert ref.share(0, 0, 0, j).decimal(10) == want["shares"][j]
    assert verify("numpy", p.with_policy(UNSCALED), "float32").passed
    bad = verify("numpy-naive", p.with_policy(UNSCALED), "float32")
    assert [x.status for x in bad.entries] == ["hard", "hard"]
    assert all(math.isnan(x.got) for x in bad.entries)


@given(st.lists(st.integers(-200, 200), min_size=1, max_size=4))
def test_overflow_whole_kind(scores):
    p = Call.from_scores([scores])
    assert verify("numpy", p.with_policy(UNSCALED), "float32").passed
    naive = verify("numpy-naive", p.with_policy(UNSCALED), "float32")
    if max(scores) > 89:           # exp overflows float32 (largest finite exp argument 88.72)
        assert not naive.passed
    elif -40 <= min(scores) and max(scores) <= 40:
        assert naive.passed


# ----------------------------------------------------------------- softmax axis

def test_softmax_axis_exact_guard_and_faulty_variant():
    case = load("softmax-axis")
    inp, want = case["input"], case["expected"]
    p = Call.from_scores(inp["scores"], inp["V"])
    ref = Reference(p.with_policy(UNSCALED))
    assert [ref.share(0, 0, 0, j).decimal(6) for j in range(2)] == want["shares"]
    assert ref.output(0, 0, 0, 0).decimal(6) == want["output"]
    assert ref.row(0, 0, 0).sum_is_one() is True
    faulty = want["faulty variant (softmax over a length-1 axis)"]
    rep = verify(FunctionImpl(softmax_over_queries), p.with_policy(UNSCALED), "float32")
    assert rep.entries[0].got == float(faulty["output"]) and rep.entries[0].status == "over"
    assert verify("numpy", p.with_policy(UNSCALED), "float32").passed


@given(st.integers(1, 4).flatmap(lambda L: st.lists(
    st.lists(st.integers(-3, 3), min_size=3, max_size=3), min_size=L, max_size=L)))
def test_softmax_axis_whole_kind(scores):
    values = [1, 3, -2]
    p = Call.from_scores(scores, values)
    ref = Reference(p.with_policy(UNSCALED))
    for i in range(len(scores)):
        assert ref.row(0, 0, i).sum_is_one() is True
        out = F(ref.output(0, 0, i, 0).decimal(12))
        assert min(values) <= out <= max(values)
    bad = verify(FunctionImpl(softmax_over_queries), p.with_policy(UNSCALED), "float64")
    if len(scores) == 1:               # shares all 1: the output is the sum of the values, 2
        assert not bad.passed and bad.entries[0].got == 2.0
