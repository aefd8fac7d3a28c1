"""check_all under the modifiers: only the properties that hold (the one table in
exactattn.properties.rules), no false alarm for correct functions, the faulty variants caught;
docs/modifiers.md agrees with the tables."""

import math
import re
from fractions import Fraction as F
from pathlib import Path

import numpy as np
import pytest

import exactattn.properties as P
from exactattn.properties import inputs as PI
from exactattn.call.policy import Mask, Policy
from exactattn.errors import InputError
from exactattn.call.modifiers import Alibi, Rope
from exactattn.call import Call
from exactattn.properties import PropertyFailure, reference
from exactattn.properties.inputs import input_text
from exactattn.properties.rules import MODIFIERS, OPT_IN, PROPERTIES, active, holds
from exactattn.reference.reference import MODIFIER_VALUES
from alibi_paper import paper_slopes

DOC = Path(__file__).resolve().parents[2] / "docs" / "modifiers.md"


def rotated(x, positions, theta, layout):
    d = x.shape[1]
    a = np.arange(d // 2) if layout == "half" else 2 * np.arange(d // 2)
    b = a + d // 2 if layout == "half" else a + 1
    phi = np.asarray(positions, dtype=float)[:, None] * theta ** (-2 * np.arange(d // 2) / d)
    out = x.astype(float).copy()
    out[:, a] = x[:, a] * np.cos(phi) - x[:, b] * np.sin(phi)
    out[:, b] = x[:, a] * np.sin(phi) + x[:, b] * np.cos(phi)
    return out


def good(queries, keys, values, *, mask=None, scale=None, softcap=None, sink=None,
         alibi_slopes=None, query_offset=0, dropout_p=None, dropout_mask=None, rope_theta=None,
         rope_layout=None):
    """Correct float attention under the modifiers (the properties' interface)."""
    scale = 1 / math.sqrt(queries.shape[-1]) if scale is None else scale
    if rope_theta is not None:
        queries = rotated(queries, query_offset + np.arange(len(queries)), rope_theta, rope_layout)
        keys = rotated(keys, np.arange(len(keys)), rope_theta, rope_layout)
    s = queries @ keys.T * scale
    if softcap is not None:
        s = softcap * np.tanh(s / softcap)
    if alibi_slopes is not None:
        pos = query_offset + np.arange(len(queries))
        s = s - alibi_slopes[0] * (pos[:, None] - np.arange(len(keys))[None, :])
    if mask is not None:
        s = np.where(mask, s, -np.inf)
        values = np.where(mask.any(axis=0)[:, None], values, 0)
    if sink is not None:
        s = np.concatenate([s, np.full((len(s), 1), sink)], axis=1)
    e = np.exp(s - s.max(axis=1, keepdims=True))
    w = e / e.sum(axis=1, keepdims=True)
    w = w[:, :len(keys)]
    if dropout_p is not None:
        w = w * np.where(dropout_mask, 1 / (1 - dropout_p), 0)
    return w @ values


def variant(**faults):
    """``good`` with one mistake of a handed case."""
    def fn(queries, keys, values, *, mask=None, scale=None, softcap=None, sink=None,
           alibi_heads=None, head=0, alibi_form=None, query_offset=0, dropout_p=None,
           dropout_mask=None):
        slopes = None
        if alibi_heads is not None:
            rule = faults.get("slopes")
            slopes = np.array([rule(alibi_heads)[head]])
        if faults.get("mask_then_cap") and softcap is not None and mask is not None:
            s = np.where(mask, queries @ keys.T * scale, -np.inf)
            return good_softmax(softcap * np.tanh(s / softcap)) @ values
        if faults.get("mix_all"):
            with np.errstate(invalid="ignore"):
                return good_softmax(np.where(mask, queries @ keys.T * scale, -np.inf)) @ values
        return good(queries, keys, values, mask=mask, scale=scale, softcap=softcap,
                    sink=None if faults.get("no_sink") else sink, alibi_slopes=slopes,
                    query_offset=query_offset,
                    dropout_p=dropout_p if dropout_p is None else faults.get("p", lambda p: p)(
                        dropout_p), dropout_mask=dropout_mask)
    return fn


def good_softmax(s):
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)




Q = [["1/2", 0], [1, -1], [0, 2], ["1/2", 0]]
K = [[1, 0], [0, 1], [1, 1], ["-1/2", 1]]
V = [[1, 0], [2, "1/3"], [-1, 1], [3, 2]]
PAD = Mask("bool_keep", [[True, True, True, False]] * 4)
POLICIES = {
    "plain": Policy(),
    "softcap": Policy(softcap="1"),
    "sink": Policy(sink="1/2"),
    "alibi": Policy(alibi=Alibi(6), head=1),
    "window": Policy(causal=True, window=(1, 0)),
    "rope": Policy(rope=Rope(F(100))),
    "dropout": Policy(dropout="1/4"),
    "sink+softcap+causal": Policy(sink="0", softcap="2", causal=True),
}
KEEP = [[True, False, True, True], [True, True, True, False], [False, True, True, True],
        [True, False, True, True]]


def inp_of(name, mask=None):
    pol = POLICIES[name]
    return PI.one_head(Q, K, V, mask, pol, KEEP if pol.dropout is not None else None)


# ----------------------------------------------------------------------------- the table
def test_every_property_in_the_table_has_a_check():
    seen = set()
    for name in POLICIES:
        for mask in (None, PAD):
            seen |= set(P.check_all(reference, inp_of(name, mask)))
    assert seen | set(OPT_IN) == set(PROPERTIES)
    assert MODIFIERS == ("causal", "window", "softcap", "sink", "alibi", "rope", "dropout")


@pytest.mark.parametrize("name", POLICIES)
def test_the_exact_reference_passes_exactly_what_holds(name):
    inp = inp_of(name, PAD if name != "window" else None)
    ran = P.check_all(reference, inp)
    on = active(inp.policy)
    first = inp.policy.causal and PI.visible(inp)[0] == [0]
    want = [n for n in PROPERTIES if holds(n, on) and n not in OPT_IN and
            (n != "causal first output" or first)]
    assert sorted(ran) == sorted(want)


def test_rules_of_the_issue():
    assert not holds("shift invariance", {"softcap"})
    assert holds("rows sum below one", {"sink"}) and not holds("rows sum to one", {"sink"})
    assert not holds("rows sum to one", {"dropout"})
    assert not holds("key permutation", {"alibi"}) and holds("key bias cancels", {"alibi"})
    with pytest.raises(InputError, match="property must be one of"):
        holds("commutes", set())


# ----------------------------------------------------------------------------- no false alarms
@pytest.mark.parametrize("name", POLICIES)
def test_a_correct_float_function_passes(name):
    inp = inp_of(name, PAD if name not in ("window", "sink+softcap+causal") else None)
    P.check_all(good, inp)


def test_soft_capping_is_not_shift_invariant_so_it_is_not_checked():
    inp = inp_of("softcap")
    ran = P.check_all(good, inp)
    assert "shift invariance" not in ran and "key bias cancels" not in ran
    with pytest.raises(PropertyFailure, match="adding a constant to a row of scores"):
        P.check_shift_invariance(reference, inp)       # it does not hold, even exactly


def test_with_a_sink_rows_sum_to_less_than_one_exactly():
    inp = inp_of("sink")
    P.check_rows_sum_below_one(reference, inp)
    with pytest.raises(PropertyFailure, match="every row of shares sums to exactly 1"):
        P.check_rows_sum_to_one(reference, inp)
    with pytest.raises(InputError, match=r"inp must have a sink"):
        P.check_rows_sum_below_one(reference, inp_of("plain"))


# ----------------------------------------------------------------------------- faulty variants
CASE_SCORES = PI.one_head([[0, 2, 5]], [[1, 0, 0], [0, 1, 0], [0, 0, 1]], [[1, 0, 0],
                             [0, 1, 0], [0, 0, 1]], Mask("bool_keep", [[True, True, False]]),
                             Policy(scale="none"))


@pytest.mark.parametrize("fault, inp, prop", [
    (dict(mask_then_cap=True), PI.replace(CASE_SCORES, policy=Policy(scale="none", softcap="1")),
     "the outputs equal the exact attention"),
    (dict(no_sink=True), inp_of("sink"), "the outputs equal the exact attention"),
    (dict(slopes=lambda h: [2 ** (-8 * k / h) for k in range(1, h + 1)]), inp_of("alibi"),
     "the outputs equal the exact attention"),
    (dict(p=lambda p: 0.0), inp_of("dropout"), "the outputs equal the exact attention"),
    (dict(p=lambda p: 1 - p), inp_of("dropout"), "the outputs equal the exact attention"),
    (dict(mix_all=True), PI.one_head([[0]], [[0], [0], [0]], [[2], [4], ["inf"]],
                                        Mask("bool_keep", [[True, True, False]])),
     "the outputs equal the exact attention"),
])
def test_faulty_variants_are_caught(fault, inp, prop):
    with pytest.raises(PropertyFailure, match=re.escape(prop)):
        P.check_all(variant(**fault), inp)


def test_the_right_variants_pass_the_same_inputs():
    P.check_all(variant(slopes=paper_slopes), inp_of("alibi"))
    P.check_all(variant(), PI.replace(CASE_SCORES, policy=Policy(scale="none", softcap="1")))
    P.check_all(variant(), PI.one_head([[0]], [[0], [0], [0]], [[2], [4], ["inf"]],
                                          Mask("bool_keep", [[True, True, False]])))


def test_window_faulty_variant_is_caught():
    def too_wide(queries, keys, values, *, mask=None, scale=None):
        n = len(queries)
        wider = mask | np.eye(n, k=-3, dtype=bool)       # w keys before plus itself
        return good(queries, keys, values, mask=wider, scale=scale)
    inp = PI.one_head([[0]] * 5, [[0]] * 5, [[1], [2], [3], [4], [5]],
                         policy=Policy(scale="none", causal=True, window=(2, 0)))
    P.check_all(good, inp)
    with pytest.raises(PropertyFailure, match=r"outputs\[3\]\[0\] = 2.5, exact 3\n  "
                                              r"outputs\[4\]\[0\] = 3.5, exact 4"):
        P.check_all(too_wide, inp)              # the case's faulty outputs 5/2 and 7/2
    with pytest.raises(PropertyFailure, match="shares are positive on visible keys and exactly 0"):
        P.check_share_support(too_wide, inp)


def test_zero_times_inf_is_caught_on_finite_inputs_too():
    inp = PI.one_head([[1], [0]], [[0], [1], [2]], [[1], [2], [3]],
                         Mask("bool_keep", [[True, True, False], [True, False, False]]))
    assert P.check_masked_nonfinite_ignored(good, inp) == 1
    with pytest.raises(PropertyFailure, match="inf or NaN values at keys no query sees"):
        P.check_masked_nonfinite_ignored(variant(mix_all=True), inp)
    assert P.check_masked_nonfinite_ignored(reference, inp) == 1


def test_nonfinite_entries_a_query_sees_are_refused_by_name():
    with pytest.raises(InputError, match=r"^key\[1\]\[0\] must be finite where a query sees "
                                         r"it \(got inf\)"):
        P.check_all(reference, Call([[0]], [[0], ["inf"]], [[1], [2]]))   # refused before a run
    inp = Call([[0]], [[0], ["inf"]], [[1], [2]], [[True, False]])
    assert PI.matrices(inp)[1][1][0] == math.inf
    assert "Call([[0]], [[0], ['inf']]," in input_text(inp)


def test_modified_input_reprs_type_back():
    inp = inp_of("dropout")
    again = eval(input_text(inp), {"Call": Call, "Policy": Policy,
                                   "Mask": Mask, "Alibi": Alibi, "Rope": Rope, "Fraction": F})
    assert again.key_of() == inp.key_of() and again.policy == inp.policy
    alibi = inp_of("alibi")
    assert "alibi=Alibi(heads=6, form='relative')" in input_text(alibi)
    assert "head=1" in input_text(alibi)


def test_exact_functions_without_policy_are_refused_for_modified_inputs():
    with pytest.raises(InputError, match="attend_as_function must take policy= for an input "
                                         "with modifiers"):
        P.check_matches_reference(P.attend_as_function, inp_of("softcap"))


# ----------------------------------------------------------------------------- the docs
def test_the_docs_property_table_is_the_rules_table():
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Which properties hold"):]
    table = [ln for ln in section.split("\n\n")[2].splitlines() if ln.startswith("|")]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    assert header == ["property", *MODIFIERS]
    rows = {}
    for ln in table[2:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    assert set(rows) == set(PROPERTIES)
    for name, cells in rows.items():
        rule = PROPERTIES[name]
        for m, cell in zip(MODIFIERS, cells):
            want = "needed" if m in rule.requires else "no" if m in rule.breaks else "yes"
            assert cell == want, (name, m, cell)


def test_the_docs_exactness_table_is_the_reference_table():
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## How exact each modifier is"):]
    table = [ln for ln in section.split("\n\n")[1].splitlines() if ln.startswith("|")]
    rows = {c[0]: c[1] for c in ([x.strip() for x in ln.strip("|").split("|")]
                                 for ln in table[2:])}
    assert rows == {k: v[0] for k, v in MODIFIER_VALUES.items()}
