"""The call model: one scale, one visibility rule, explicit masks, presets."""

from fractions import Fraction as F

import pytest

from exactattn.call.policy import (ALIGNMENTS, Mask, Policy, divisor_text, parse_divisor, parse_scale,
                            preset)
from exactattn.errors import FloatInputError, InputError, ShapeError


def keys(policy, n_q, n_k):
    return [list(policy.visible_keys(i, n_q, n_k)) for i in range(n_q)]


def test_one_spelling_of_alignment():
    assert ALIGNMENTS == ("top_left", "bottom_right")
    with pytest.raises(InputError, match=r"alignment must be one of top_left, bottom_right "
                                         r"\(got 'top-left'\)"):
        Policy(alignment="top-left")


@pytest.mark.parametrize("alignment,n_q,n_k,want", [
    ("top_left", 3, 3, [[0], [0, 1], [0, 1, 2]]),
    ("bottom_right", 3, 3, [[0], [0, 1], [0, 1, 2]]),        # the two agree on a square
    ("top_left", 2, 4, [[0], [0, 1]]),
    ("bottom_right", 2, 4, [[0, 1, 2], [0, 1, 2, 3]]),       # decode: the last query sees all
    ("bottom_right", 4, 2, [[], [], [0], [0, 1]]),           # more queries than keys: empty rows
])
def test_visible_keys(alignment, n_q, n_k, want):
    p = Policy(causal=True, alignment=alignment)
    assert keys(p, n_q, n_k) == want
    assert p.keep(n_q, n_k).tolist() == [[j in w for j in range(n_k)] for w in want]
    assert p.pairs(n_q, n_k) == sum(map(len, want))


def test_without_causal_every_key_is_visible():
    assert keys(Policy(), 2, 3) == [[0, 1, 2], [0, 1, 2]]


def test_mask_narrows_the_rule():
    m = Mask("bool_drop", [[False, True, False], [True, False, False]])
    p = Policy(causal=True)
    assert p.keep(2, 3, m).tolist() == [[True, False, False], [False, True, False]]
    assert p.pairs(2, 3, m) == 2


def test_causal_pairs_are_n_n_plus_one_over_two():
    assert Policy(causal=True).pairs(10, 10) == 55


@pytest.mark.parametrize("text,want", [("2", F(4)), ("sqrt(2)", F(2)), ("none", None),
                                       ("0.5", F(1, 4)), (F(3), F(9))])
def test_parse_divisor(text, want):
    got = parse_divisor(text)
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize("text,want", [("default", "default"), ("1/sqrt(48)", F(48)),
                                       ("0.125", F(64)), ("none", None), ("1/8", F(64))])
def test_parse_scale_stores_the_divisor_squared(text, want):
    got = parse_scale(text)
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize("bad", ["0", "-1", "sqrt(-2)", "abc", ""])
def test_bad_divisors(bad):
    with pytest.raises(InputError, match=r"divisor must be a positive number, sqrt\(q\) for a "
                                         r"positive rational q \(such as sqrt\(2\)\), or 'none'"):
        parse_divisor(bad)


def test_float_divisor_is_refused_unless_said():
    with pytest.raises(FloatInputError):
        parse_divisor(0.5)
    assert parse_divisor(0.5, floats="decimal") == F(1, 4)


def test_scale_texts():
    assert Policy(scale="1/8").scale_text() == "1/8"
    assert Policy(scale="1/sqrt(48)").scale_text() == "1/sqrt(48)"
    assert Policy(scale="none").scale_text() == "none"
    assert Policy(scale="none").divisor_squared_for(16) is None
    assert Policy().divisor_squared_for(16) == F(16)
    assert divisor_text(F(9, 4)) == "3/2" and divisor_text(F(2)) == "sqrt(2)"


def test_presets_and_gqa():
    assert preset("flash").alignment == "bottom_right"
    assert preset("xformers").mask_kind == "additive"
    assert [Policy().kv_head(h, 6, 2) for h in range(6)] == [0, 0, 0, 1, 1, 1]
    assert [Policy(gqa="tile").kv_head(h, 6, 2) for h in range(6)] == [0, 1, 0, 1, 0, 1]
    with pytest.raises(ShapeError, match="query heads must be a multiple of key/value heads"):
        Policy().kv_head(0, 3, 2)


def test_additive_masks_read_minus_infinity_three_ways():
    m = Mask("additive", [[0, "-inf", None, float("-inf"), "1/2"]])
    assert [m.keeps(0, j) for j in range(5)] == [True, False, False, False, True]
    assert m.offsets(0) == [F(0)] * 4 + [F(1, 2)]
    assert m.has_offsets
    with pytest.raises(InputError, match="mask_as must be 'additive'"):
        m.as_form("bool_keep")


@pytest.mark.parametrize("kind,rows,match", [
    ("bool_keep", [[1, 0]], r"mask\[0\]\[0\] must be True or False in a bool_keep mask"),
    ("causal_top_left", [[True]], "kind must be one of bool_keep, bool_drop, additive"),
    ("additive", [[True]], r"mask\[0\]\[0\] must be a number or '-inf'"),
    ("bool_drop", [[True], [True, False]], "mask must have rows of equal length"),
    ("bool_keep", [], "mask must have at least one row and one column"),
])
def test_bad_masks(kind, rows, match):
    with pytest.raises((InputError, ShapeError), match=match):
        Mask(kind, rows)


def test_masks_are_values():
    a = Mask("bool_keep", [[True, False]])
    assert a == Mask("bool_keep", [[True, False]]) and hash(a) == hash(Mask("bool_keep", [[True, False]]))
    assert repr(a) == "Mask('bool_keep', [[True, False]])"
    assert a.select([0], [1, 0]).rows == ((False, True),)


def test_numpy_booleans_are_booleans_in_a_list_of_mask_rows():
    """numpy 2 names its scalar bool type 'bool': a list of np.True_/np.False_ rows is a boolean
    mask (kept as Python bools), and still not an additive one."""
    import numpy as np
    m = Mask("bool_keep", [[np.True_, np.False_]])
    assert m == Mask("bool_keep", [[True, False]]) and type(m.rows[0][0]) is bool
    with pytest.raises(InputError, match=r"mask\[0\]\[0\] must be a number or '-inf' for an additive"):
        Mask("additive", [[np.True_]])


def test_a_head_and_its_tokens_become_one_call():
    """Call.of_head: the exact projections x W^T + b of either layout, the head's policy, rank 2,
    and the dropout keep-mask; attend's trace holds the same numbers."""
    from exactattn import Head, attend
    from exactattn.call import Call
    head = Head([[1, 2], [0, 1]], [[1, 0], [1, 1]], [[1, 1], ["1/2", 0]], b_Q=[1, 0], b_V=[0, "1/3"],
                layout="rows", divisor="3")
    x = [[1, "1/2"], [2, -1]]
    c = Call.of_head(head, x, name="h")
    assert (c.rank, c.name, c.policy, c.mask, c.dropout_keep) == (2, "h", head.policy, None, None)
    assert c.query[0, 0].tolist() == [[F(2), F(5, 2)], [F(3), F(3)]]
    assert c.key[0, 0].tolist() == [[F(3, 2), F(1, 2)], [F(1), F(-1)]]
    assert c.value[0, 0].tolist() == [[F(5, 4), F(4, 3)], [F(3, 2), F(7, 3)]]
    t = attend(head, x)
    assert (t.queries, t.keys, t.values) == tuple(a[0, 0].tolist() for a in (c.query, c.key, c.value))
    dropped = head.with_policy(head.policy.replace(dropout=F(1, 2)))
    keep = Call.of_head(dropped, x, dropout_keep=[[True, False], [True, True]]).dropout_keep
    assert keep.shape == (1, 1, 2, 2) and keep.tolist() == [[[[True, False], [True, True]]]]


@pytest.mark.parametrize("x, kind, message", [
    ([], ShapeError, r"^x must have at least one token \(got none\)$"),
    ([[1, 2], [1]], ShapeError, r"^token 2 must have d_model = 2 numbers \(got 1\)$"),
    ([[1, 0.5]], FloatInputError, r"^x\[0\]\[1\] "),
])
def test_a_head_call_refuses_tokens_as_attend_does(x, kind, message):
    from exactattn import Head
    from exactattn.call import Call
    with pytest.raises(kind, match=message):
        Call.of_head(Head([[1, 0]], [[0, 1]], [[1, 1]]), x)


def test_a_head_call_refuses_a_keep_mask_of_another_shape():
    from exactattn import Head
    from exactattn.call import Call
    with pytest.raises(ShapeError, match=r"^dropout_keep must be L x S = 1 x 1 or broadcast to "
                                         r"1 x 1 x 1 x 1 \(got 2\)$"):
        Call.of_head(Head([[1]], [[1]], [[1]]), [[1]], dropout_keep=[True, False])


def test_a_head_index_past_the_batch_or_the_heads_is_refused_in_one_line():
    """Call.head(b, h): negative indices count from the end; past the end, one InputError
    (a slice past the end gave an empty call, then a traceback in the row blocks)."""
    from exactattn.call import Call
    c = Call.random(4, 2, heads=4, kv_heads=2, batch=2, seed=1)
    assert c.head(-1, -1).numerators("query")[0].tolist() == \
        c.head(1, 3).numerators("query")[0].tolist()
    for b, h in [(2, 0), (0, 4), (-3, 0), (0, "1")]:
        with pytest.raises(InputError, match=r"^head must be a batch below 2 and a query head "
                                             r"below 4 \(got "):
            c.head(b, h)
