"""exactattn.strategies: public names, argument checks, what is drawn, and where it shrinks to."""

import re
import subprocess
import sys
from fractions import Fraction as F
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import find, given, settings

from exactattn.properties import inputs as PI
from exactattn import Head
from exactattn import strategies as eas
from exactattn.call.policy import DEFAULT_SCALE, MASK_KINDS, Mask, Policy
from exactattn.errors import FloatInputError, InputError
from exactattn.call import Call

ROOT = Path(__file__).resolve().parents[2]
FIND = settings(database=None, max_examples=500)


def test_all_is_exactly_the_public_strategies():
    assert eas.__all__ == [
        "attention_inputs", "block_splits", "divisors", "head_inputs",
        "heads", "masks", "matrices", "rationals", "scales", "token_rows"]
    assert eas.__all__ == sorted(eas.__all__)
    for name in eas.__all__:
        assert callable(getattr(eas, name)), name


def test_importing_exactattn_does_not_import_hypothesis():
    package = ROOT / "exactattn"
    modules = sorted(".".join(p.relative_to(package).with_suffix("").parts)
                     for p in package.rglob("*.py") if p.stem not in ("strategies", "__main__"))
    modules = [m.removesuffix(".__init__") for m in modules if m != "__init__"]
    code = ("import sys, exactattn\n"
            + "".join(f"import exactattn.{m}\n" for m in modules)
            + "print('hypothesis' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------- every bad argument, named
BAD_ARGUMENTS = [
    (eas.rationals, dict(min_value=2, max_value=1), "max_value must be at least min_value = 2 (got 1)"),
    (eas.rationals, dict(max_denominator=0), "max_denominator must be a positive whole number (got 0)"),
    (eas.rationals, dict(max_denominator=True), "max_denominator must be a positive whole number (got True)"),
    (eas.rationals, dict(min_value="abc"), "min_value must be a number such as 3, '1/2' or '-0.75' (got 'abc')"),
    (eas.rationals, dict(min_value="1/3", max_value="2/5", max_denominator=2),
     "max_value must leave a fraction with denominator at most 2 above min_value = 1/3 (got '2/5')"),
    (eas.matrices, dict(rows=0, columns=1), "rows must be a positive whole number (got 0)"),
    (eas.matrices, dict(rows=1, columns="2"), "columns must be a positive whole number (got '2')"),
    (eas.matrices, dict(rows=1, columns=1, elements=[1]), "elements must be a Hypothesis strategy or None (got [1])"),
    (eas.token_rows, dict(d_model=0), "d_model must be a positive whole number (got 0)"),
    (eas.token_rows, dict(d_model=2, min_n=4, max_n=3), "max_n must be at least min_n = 4 (got 3)"),
    (eas.divisors, dict(allow_irrational="no"), "allow_irrational must be True or False (got 'no')"),
    (eas.divisors, dict(allow_default=None), "allow_default must be True or False (got None)"),
    (eas.scales, dict(allow_default=0), "allow_default must be True or False (got 0)"),
    (eas.heads, dict(min_d_model=0), "min_d_model must be a positive whole number (got 0)"),
    (eas.heads, dict(min_d_k=3, max_d_k=2), "max_d_k must be at least min_d_k = 3 (got 2)"),
    (eas.heads, dict(max_d_v=1.5), "max_d_v must be a positive whole number (got 1.5)"),
    (eas.heads, dict(layouts="slots"), "layouts must be a non-empty collection of 'slots', 'rows' (got 'slots')"),
    (eas.heads, dict(layouts=()), "layouts must be a non-empty collection of 'slots', 'rows' (got ())"),
    (eas.heads, dict(causal="yes"), "causal must be True, False or None (got 'yes')"),
    (eas.heads, dict(divisors=2), "divisors must be a Hypothesis strategy or None (got 2)"),
    (eas.head_inputs, dict(max_n=0), "max_n must be a positive whole number (got 0)"),
    (eas.head_inputs, dict(heads=Head([[1]], [[1]], [[1]])),
     "heads must be a Hypothesis strategy or None (got Head(d_model=1"),
    (eas.masks, dict(n_queries=0, n_keys=1), "n_queries must be a positive whole number (got 0)"),
    (eas.masks, dict(n_queries=1, n_keys=1, kinds=("causal",)),
     "kinds must be a non-empty collection of 'bool_keep', 'bool_drop', 'additive' "
     "(got ('causal',)); the causal rule is Policy(causal=True), drawn by "
     "attention_inputs(causal=..., alignments=...)"),
    (eas.masks, dict(n_queries=1, n_keys=1, allow_empty_rows=1), "allow_empty_rows must be True or False (got 1)"),
    (eas.masks, dict(n_queries=1, n_keys=1, offsets="0"), "offsets must be a Hypothesis strategy or None (got '0')"),
    (eas.attention_inputs, dict(min_n=2, max_n=1), "max_n must be at least min_n = 2 (got 1)"),
    (eas.attention_inputs, dict(min_d_k=0), "min_d_k must be a positive whole number (got 0)"),
    (eas.attention_inputs, dict(mask_kinds=[]), "mask_kinds must be a non-empty collection of None, "),
    (eas.attention_inputs, dict(self_attention="true"), "self_attention must be True or False (got 'true')"),
    (eas.attention_inputs, dict(mask_kinds=("causal_top_left",)),
     "mask_kinds must be a non-empty collection of None, 'bool_keep', 'bool_drop', 'additive' "
     "(got ('causal_top_left',)); the causal rule is Policy(causal=True)"),
    (eas.attention_inputs, dict(causal="yes"), "causal must be True, False or None (got 'yes')"),
    (eas.attention_inputs, dict(alignments=("top-left",)),
     "alignments must be a non-empty collection of 'top_left', 'bottom_right' (got ('top-left',))"),
    (eas.attention_inputs, dict(scales=F(1)), "scales must be a Hypothesis strategy or None (got Fraction(1, 1))"),
    (eas.block_splits, dict(n=-1), "n must be a positive whole number (got -1)"),
]


@pytest.mark.parametrize("strategy, kwargs, message", BAD_ARGUMENTS,
                         ids=[f"{s.__name__}-{'-'.join(k)}" for s, k, _ in BAD_ARGUMENTS])
def test_bad_arguments_are_refused_naming_the_argument_and_value(strategy, kwargs, message):
    with pytest.raises(InputError, match="^" + re.escape(message)):
        strategy(**kwargs)


def test_a_binary_float_bound_is_refused():
    with pytest.raises(FloatInputError, match=re.escape("min_value is a binary float (0.1)")):
        eas.rationals(min_value=0.1)


def test_options_are_keyword_only():
    with pytest.raises(TypeError):
        eas.rationals(-1, 1)
    with pytest.raises(TypeError):
        eas.matrices(2, 2)


# ---------------------------------------------------------------- what is drawn
@given(eas.rationals(min_value="-1/2", max_value="3/4", max_denominator=3))
def test_rationals_respect_their_bounds(q):
    assert type(q) is F
    assert F(-1, 2) <= q <= F(3, 4)
    assert q.denominator <= 3


@given(eas.matrices(rows=2, columns=3))
def test_matrices_have_the_asked_shape(m):
    assert len(m) == 2 and all(len(r) == 3 for r in m)
    assert all(type(e) is F and -3 <= e <= 3 and e.denominator <= 4 for r in m for e in r)


@given(eas.heads(min_d_model=2, max_d_model=3, max_d_k=2, min_d_v=2, max_d_v=2))
def test_heads_respect_their_bounds(head):
    assert isinstance(head, Head)
    assert 2 <= head.d_model <= 3 and 1 <= head.d_k <= 2 and head.d_v == 2
    assert head.layout in ("slots", "rows")
    assert all(type(e) is F for m in (head.W_Q, head.W_K, head.W_V) for r in m for e in r)
    assert head.divisor_squared is None or type(head.divisor_squared) is F


@given(eas.heads(layouts=("rows",), causal=True, divisors=st.just("sqrt(3)")))
def test_heads_take_layout_causal_and_divisor(head):
    assert head.layout == "rows" and head.causal is True
    assert head.divisor_squared == F(3)


@given(eas.head_inputs(min_n=2, max_n=3, heads=eas.heads(max_d_model=2)))
def test_head_inputs_fit_their_head(pair):
    head, x = pair
    assert 2 <= len(x) <= 3
    assert all(len(r) == head.d_model <= 2 for r in x)


@given(eas.divisors())
def test_divisors_are_what_a_head_accepts(divisor):
    kwargs = {} if divisor == DEFAULT_SCALE else {"divisor": divisor}
    head = Head([[1]], [[1]], [[1]], **kwargs)
    assert head.divisor_squared is None or head.divisor_squared > 0


@given(eas.scales(allow_irrational=False, allow_default=False))
def test_rational_scales_are_squares(D):
    assert type(D) is F
    a, b = D.numerator, D.denominator
    assert round(a ** 0.5) ** 2 == a and round(b ** 0.5) ** 2 == b


@given(eas.scales())
def test_scales_are_what_a_policy_stores(scale):
    assert scale == DEFAULT_SCALE or (type(scale) is F and scale > 0)
    assert Policy(divisor_squared=scale).divisor_squared == scale


@given(st.data(), st.integers(1, 4), st.integers(1, 4))
def test_masks_are_explicit_and_leave_no_row_empty(data, n_q, n_k):
    mask = data.draw(eas.masks(n_queries=n_q, n_keys=n_k))
    assert isinstance(mask, Mask) and mask.kind in MASK_KINDS
    assert (mask.n_queries, mask.n_keys) == (n_q, n_k)
    for i in range(n_q):
        assert any(mask.keeps(i, j) for j in range(n_k))


@given(st.integers(1, 3), st.integers(1, 3), st.data())
def test_masks_may_hide_whole_rows_when_allowed(n_q, n_k, data):
    mask = data.draw(eas.masks(n_queries=n_q, n_keys=n_k, allow_empty_rows=True))
    assert isinstance(mask, Mask) and (mask.n_queries, mask.n_keys) == (n_q, n_k)


def test_empty_rows_appear_when_allowed():
    mask = find(eas.masks(n_queries=2, n_keys=2, kinds=("bool_keep",), allow_empty_rows=True),
                lambda m: not any(m.keeps(0, j) for j in range(2)), settings=FIND)
    assert mask == Mask("bool_keep", [[False, False], [True, True]])


@given(eas.attention_inputs(max_n=3, max_d_k=2, max_d_v=3))
def test_attention_inputs_are_consistent(inp):
    assert isinstance(inp, Call) and isinstance(inp.policy, Policy)
    assert 1 <= PI.sizes(inp)[0] <= 3 and 1 <= PI.sizes(inp)[1] <= 3
    assert PI.sizes(inp)[2] <= 2 and PI.sizes(inp)[3] <= 3
    assert all(PI.visible(inp)[i] for i in range(PI.sizes(inp)[0]))
    assert all(type(e) is F for m in PI.matrices(inp) for r in m for e in r)


@given(eas.attention_inputs(max_n=4, causal=True))
def test_the_causal_rule_is_drawn_in_both_alignments(inp):
    n_q, n_k = PI.sizes(inp)[:2]
    shift = 0 if inp.policy.alignment == "top_left" else n_k - n_q   # an independent rule
    for i in range(n_q):
        for j in range(n_k):
            by_position = j <= i + shift
            by_mask = inp.block_mask(0, 0) is None or inp.block_mask(0, 0).keeps(i, j)
            assert bool(PI.keep(inp)[i, j]) == (by_position and by_mask)
    assert all(PI.visible(inp)[i] for i in range(n_q))


def test_every_alignment_is_drawn():
    for alignment in ("top_left", "bottom_right"):
        small = eas.attention_inputs(max_n=2, max_d_k=1, max_d_v=1, mask_kinds=(None,))
        inp = find(small, lambda i: i.policy.causal and i.policy.alignment == alignment
                   and PI.sizes(i)[1] > PI.sizes(i)[0], settings=FIND)
        assert inp.policy == Policy(causal=True, alignment=alignment)
        assert (PI.sizes(inp)[0], PI.sizes(inp)[1]) == (1, 2)


def test_additive_masks_keep_their_offsets_under_an_irrational_scale():
    small = eas.attention_inputs(max_n=2, max_d_k=1, max_d_v=1, mask_kinds=("additive",),
                                 causal=False, scales=st.just(F(2)))
    inp = find(small, lambda i: i.block_mask(0, 0).has_offsets, settings=FIND)
    assert inp.block_mask(0, 0).kind == "additive"
    assert inp.policy.divisor_squared_for(PI.sizes(inp)[2]) == F(2)


@given(eas.attention_inputs(self_attention=True, mask_kinds=(None,), causal=True,
                            alignments=("bottom_right",)))
def test_self_attention_inputs_are_square(inp):
    assert PI.sizes(inp)[0] == PI.sizes(inp)[1]
    assert inp.policy.causal and inp.policy.alignment == "bottom_right"


@given(eas.block_splits(n=5))
def test_block_splits_cut_the_whole_row(blocks):
    assert sum(blocks) == 5 and all(b >= 1 for b in blocks)


# ---------------------------------------------------------------- shrinking
def test_rationals_shrink_to_zero_then_small_denominators():
    assert find(eas.rationals(), lambda q: True, settings=FIND) == 0
    assert find(eas.rationals(), lambda q: q < 0, settings=FIND) == -1
    assert find(eas.rationals(), lambda q: q.denominator == 4, settings=FIND) == F(1, 4)


def test_heads_shrink_to_width_one_zero_weights_and_defaults():
    head = find(eas.heads(), lambda h: True, settings=FIND)
    assert (head.d_model, head.d_k, head.d_v, head.layout, head.causal) == (1, 1, 1, "slots", False)
    assert head.W_Q == head.W_K == head.W_V == [[0]]
    assert head.divisor_squared == F(1)          # the default sqrt(d_k) at d_k = 1


def test_heads_shrink_to_the_smallest_failing_width():
    head = find(eas.heads(), lambda h: h.d_k >= 3, settings=FIND)
    assert (head.d_model, head.d_k, head.d_v) == (1, 3, 1)


def test_attention_inputs_shrink_to_one_zero_token_without_mask():
    inp = find(eas.attention_inputs(), lambda i: True, settings=FIND)
    assert inp.key_of() == PI.one_head([[0]], [[0]], [[0]]).key_of()
    assert inp.policy == Policy() and inp.policy.divisor_squared == DEFAULT_SCALE


def test_attention_inputs_shrink_towards_hiding_nothing():
    inp = find(eas.attention_inputs(mask_kinds=("bool_drop",)), lambda i: True, settings=FIND)
    assert inp.block_mask(0, 0) == Mask("bool_drop", [[False]])


def test_block_splits_shrink_to_one_block():
    assert find(eas.block_splits(n=4), lambda b: True, settings=FIND) == [4]
