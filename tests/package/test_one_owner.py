"""Each concept has one owner: modifier checks, field lists, the counted step, scaled scores,
cell texts.  The parsers (flags, spec fields) pass their names in and let the owner's
one-line error through; the engines share one step."""

import argparse
import importlib.util
from fractions import Fraction as F

import pytest
import sympy

from exactattn.call.policy import SCORE_FIELDS, UNSUPPORTED, Policy
from exactattn.present.cells import (Scaler, fraction_texts, root_text, value_cell, with_decimal,
                                     with_rounded)
from exactattn.commands.modifier_flags import FLAGS, add_flags
from exactattn.errors import InputError, ShapeError, SpecError
from exactattn.examples import chronicle
from exactattn.engines.head import Head, attend, scaled_score
from exactattn.numbers.exact import common_denominator
from exactattn.reference.logits import scaled_logit
from exactattn.call.modifiers import dropout_factors
from exactattn.numbers.lse import LSE_BASES, LogSumExp, check_base
from exactattn.call.inputs import Call
from exactattn.reference.kernels import to_fractions
from exactattn.reference.reference import Reference
from exactattn.call.modifiers import check_keep
from exactattn.call.modifiers import (Alibi, Rope, check_dropout, check_form, check_layout,
                                 check_softcap, check_theta)
from exactattn.numbers.reals import Surd, sympy_ball
from exactattn.present.render import Cell, reader_text
from exactattn.numbers.softmax import SoftmaxRow
from exactattn.call.spec import POLICY_KEYS
from exactattn.call.spec_fields import read_modifiers


# ----------------------------------------------------------------------------- field lists
def test_spec_keys_and_flags_stay_as_users_write_them():
    """The spec file's policy keys and the modifier flags are what users type: a renamed Policy
    field must not rename them."""
    assert FLAGS["query_offset"] == "--query-offset" and FLAGS["head"] == "--head"
    assert POLICY_KEYS == ("scale", "causal", "alignment", "empty_row", "mask_kind", "gqa",
                           "window", "query_offset", "rope", "softcap", "alibi", "sink",
                           "dropout", "head", "lse")


#: one value per field the capability table can name, and each path's entry point
_SET = {"rope": Rope(), "dropout": F(1, 2), "softcap": F(5), "sink": F(0), "alibi": Alibi(2),
        "window": (1, 0), "query_offset": 1}
_PATHS = ("fast", "gradients", "blocks", "sdpa", "numpy_backward") + \
    (("jax",) if importlib.util.find_spec("jax") else ())


def _run_path(path: str, policy: Policy):
    from exactattn.call import Call
    from exactattn.gradients import gradients
    keep = [[True, True], [True, True]] if policy.dropout is not None else None
    if path == "fast":
        head = Head([[1, 0], [0, 1]], [[1, 0], [0, 1]], [[1, 0], [0, 1]]).with_policy(policy)
        return attend(head, [[1, 0], [0, 1]], engine="fast", dropout_keep=keep)
    if path == "gradients":          # soft-caps and RoPE too: it reads Reference(call).gradients
        return gradients([[1], [0]], [[1], [2]], [[1], [0]], [[1], [1]], policy,
                         dropout_keep=keep).dQ[0][0].decimal(4)
    if path == "blocks":
        return Call([[1], [0]], [[1], [2]], [[1], [0]], policy=policy).head()
    if path == "numpy_backward":
        import numpy as np
        from exactattn.call import Call
        from exactattn.verify.impls import NumpyImpl, make_call
        call = Call([["1"], ["0"]], [["1"], ["2"]], [["1"], ["0"]], policy=policy,
                    dropout_keep=keep)
        return NumpyImpl().backward(make_call(call, "float64"), np.ones((2, 1)))
    if path == "jax":
        from exactattn.call import Call
        from exactattn.verify import verify
        call = Call([["1"], ["0"]], [["1"], ["2"]], [["1"], ["0"]], policy=policy,
                    dropout_keep=keep)
        return verify("jax", call, "float32")
    if path == "sdpa":
        from exactattn.blocks import check_impl
        return check_impl("numpy", [[1.0], [0.0]], [[1.0], [2.0]], [[1.0], [0.0]], "float32",
                          policy)
    raise AssertionError(path)


@pytest.mark.parametrize("path, field", [(p, f) for p in _PATHS for f in UNSUPPORTED.get(p, ())])
def test_each_path_refuses_what_the_capability_table_lists(path, field):
    policy = Policy(**{field: _SET[field]})
    assert policy.unsupported(path) == [field]
    with pytest.raises(InputError):
        _run_path(path, policy)


@pytest.mark.parametrize("path", _PATHS)
def test_each_path_runs_what_the_capability_table_leaves_out(path):
    assert _run_path(path, Policy(causal=True)) is not None
    refused = set(UNSUPPORTED.get(path, ())) | (set(SCORE_FIELDS) if path == "sdpa" else set())
    for field in sorted(set(_SET) - refused - {"dropout", "rope", "query_offset"}):
        assert _run_path(path, Policy(**{field: _SET[field]})) is not None, field


def test_the_float64_enclosure_reads_the_capability_table():
    from exactattn.reference.bound import supported
    for field in UNSUPPORTED["enclose"]:
        assert supported(Policy(**{field: _SET[field]})) == field
    assert supported(Policy(rope=Rope(), softcap=F(5))) == "rope"       # the table's order
    assert supported(Policy(causal=True, sink=F(0), window=(1, 0), query_offset=1)) is None


def _flag_error(*argv) -> str:
    p = argparse.ArgumentParser(exit_on_error=False)
    add_flags(p)
    with pytest.raises(argparse.ArgumentError) as e:
        p.parse_args(list(argv))
    return str(e.value).split(": ", 1)[1]


# ----------------------------------------------------------------------------- one check each
@pytest.mark.parametrize("check, value, name, message", [
    (check_dropout, "1", "dropout", "dropout must be a probability from 0 up to (not including) "
                                    "1 (got '1')"),
    (check_dropout, F(-1, 2), "p", "p must be a probability from 0 up to (not including) 1 "
                                   "(got -1/2)"),
    (check_softcap, "0", "--softcap", "--softcap must be positive (got '0')"),
    (check_theta, "-1", "rope.theta", "rope.theta must be a positive number (got '-1')"),
    (check_form, "x", "alibi.form", "alibi.form must be one of relative, absolute, symmetric "
                                    "(got 'x')"),
    (check_layout, "x", "--rope LAYOUT", "--rope LAYOUT must be one of half, interleaved "
                                         "(got 'x')"),
    (check_base, "10", "lse", "lse must be one of e, 2 (got '10')"),
])
def test_each_check_names_what_the_caller_passes(check, value, name, message):
    with pytest.raises(InputError) as e:
        check(value, name)
    assert str(e.value) == message


def test_policy_flags_and_spec_fields_give_the_owners_message():
    rule = "must be a probability from 0 up to (not including) 1 (got '1')"
    with pytest.raises(InputError, match=r"^dropout " + rule.replace("(", r"\(").replace(")", r"\)")):
        Policy(dropout="1")
    assert _flag_error("--dropout", "1") == "--dropout " + rule
    with pytest.raises(SpecError) as e:
        read_modifiers({"dropout": {"p": "1", "keep": [[True]]}})
    assert str(e.value) == "spec: policy.dropout.p " + rule
    assert _flag_error("--alibi", "4:x") == \
        "--alibi FORM must be one of relative, absolute, symmetric (got 'x')"
    assert _flag_error("--lse", "10") == "--lse must be one of e, 2 (got '10')"
    assert check_base(2) == "2" and check_base("e") == "e" and LSE_BASES == ("e", "2")
    assert LogSumExp(SoftmaxRow([F(0)], None), 2).base == "2"
    assert Rope("500000").theta == F(500000) and type(Rope("500000").theta) is F
    fields = read_modifiers({"softcap": "1/2", "window": [1, None], "head": 1,
                             "alibi": {"heads": 4}, "rope": {"layout": "interleaved"}})
    assert fields.changes == {"softcap": F(1, 2), "window": (1, None), "head": 1,
                              "alibi": Alibi(4), "rope": Rope(F(10000), "interleaved")}
    assert type(fields.changes["softcap"]) is F and type(fields.changes["window"]) is tuple


def test_one_keep_mask_check_names_the_field():
    policy = Policy(dropout="1/2")
    assert check_keep([[True, False]], policy, 1, 2) == [[True, False]]
    with pytest.raises(InputError, match=r"^dropout\.keep\[0\]\[1\] must be true or false \(got 0\)$"):
        check_keep([[True, 0]], policy, 1, 2, "dropout.keep")
    with pytest.raises(ShapeError, match=r"^dropout\.keep must be 1 x 2 "):
        check_keep([[True]], policy, 1, 2, "dropout.keep")


# ----------------------------------------------------------------------------- one counted step
def _integers(example):
    head, x = example.head, example.x
    xi = common_denominator(x)
    from exactattn.engines.layer import project_biased
    return [project_biased(w, b, *xi) for w, b in ((head.W_Q, head.b_Q), (head.W_K, head.b_K),
                                                  (head.W_V, head.b_V))]


def _reference(q, k, v, dq, dk, dv, policy):
    return Reference(Call(*(to_fractions(t, d) for t, d in ((q, dq), (k, dk), (v, dv))),
                          policy=policy))


def test_one_step_for_plain_and_modified_heads():
    ex = chronicle()
    (q, dq, _, _), (k, dk, _, _), (v, dv, _, _) = _integers(ex)
    step = _reference(q, k, v, dq, dk, dv, Policy(divisor_squared=F(4)))
    trace = attend(ex.head, ex.x)
    assert step.counts()[0] == {"scores": 64, "mix": 64} and trace.macs["mix"] == 64
    assert [[o.exact() for o in r] for r in Reference(trace.call).outputs()] == trace.outputs
    assert Reference(trace.call).counts()[0] == step.counts()[0]
    joined = _reference(q, k, v, dq * dk, 1, dv, Policy(divisor_squared=F(4)))
    assert joined.counts()[0] == {"scores": 64, "mix": 64}
    assert [joined.row(0, 0, i).raw for i in range(4)] == \
        [step.row(0, 0, i).raw for i in range(4)] == [trace.raw_score_row(i) for i in range(4)]
    same = _reference([[1], [1]], [[1], [0]], [[3], [1]], 1, 1, 1,
                      Policy(scale=None, sink=F(0)))
    assert same.row(0, 0, 0) is same.row(0, 0, 1)   # equal rows, no position in the logits: one row
    alibi = _reference([[1], [1]], [[1], [0]], [[3], [1]], 1, 1, 1,
                       Policy(scale=None, alibi=Alibi(2)))
    assert alibi.row(0, 0, 0) is not alibi.row(0, 0, 1)
    one = _reference([[1], [0]], [[1], [0]], [[3], [1]], 1, 1, 1, Policy(scale=None, sink=F(0)))
    assert (one.row(0, 0, 0).sink_share().text(), one.counts()[0]) == \
        ("1/(2 + exp(1))", {"scores": 4, "mix": 4})


def test_trace_rows_and_dropout_weights_follow_the_one_rule():
    h = Head([[1]], [[1]], [[1]], divisor=None)
    policy = h.policy.replace(dropout=F(1, 3))
    keep = [[True, False], [True, True]]
    t = attend(h.with_policy(policy), [[0], [1]], dropout_keep=keep)
    f = dropout_factors(F(1, 3), keep[1])
    assert f == [F(3, 2), F(3, 2)]
    assert t.dropped_share(1, 0) == t.row(1).combine([f[0], 0]) and t.dropped_share(1, 0).decimal(6) == "0.403412"
    assert t.output(1, 0) == t.row(1).combine([0 * f[0], 1 * f[1]])
    assert t.dropped_sum(1).rational() == F(3, 2) and t.dropped_share(0, 1).rational() == 0
    plain = attend(h, [[0], [1]])
    assert plain.row(1).counts == SoftmaxRow([F(0), F(1)], None).counts


# ----------------------------------------------------------------------------- scaled scores
def test_scaled_scores_are_surds_and_scaler_only_writes_them():
    v = scaled_score(F(-33, 25), F(2))
    assert type(v) is Surd and v == scaled_logit(F(-33, 25), F(2))
    assert Scaler(F(2)).value(F(-33, 25)) == v
    assert root_text(v) == "-33*sqrt(2)/50" == str(sympy.expand(sympy.Rational(-33, 25) /
                                                                sympy.sqrt(2)))
    assert Scaler(F(2)).text(F(-33, 25), 4) == "-33*sqrt(2)/50 ~ -0.9334"
    assert scaled_score(F(3), F(4)) == F(3, 2) and type(scaled_score(F(3), F(4))) is F
    assert scaled_score(None, F(2)) is None
    a = sympy.Symbol("a")
    assert scaled_score(a, F(2)) == sympy.sqrt(2) * a / 2
    assert Head([[1]], [[1]], [[1]], divisor="sqrt(2)").divisor == 2 * Surd(0, ((F(2), 1),))
    ints = [3, -7, 0, None, 10 ** 4400, 40]
    for d2 in (F(2), F(48), F(3, 2), F(1, 8)):
        scale = Scaler(d2)
        assert scale.row(ints, 40, None) == [None if v is None else scale.exact(F(v, 40))
                                             for v in ints]


# ----------------------------------------------------------------------------- small owners
def test_one_text_of_a_fraction_with_its_decimal():
    assert with_rounded("3/8", 3, 8) == "3/8 = 0.375" == with_decimal(F(3, 8), 4)
    assert with_rounded("1/8", 1, 8, exact=False, rounded="0.12") == "1/8 ~ 0.12"
    assert with_decimal(F(1, 8000), 3) == "1/8000 = 0.000125"
    assert with_decimal(F(5, 6), 0) == "5/6 ~ 1" and with_decimal(F(1, 6), 0) == "1/6 ~ 0"
    assert fraction_texts([1, 5], 6, 0) == ["1/6 ~ 0", "5/6 ~ 1"]
    cell = value_cell(SoftmaxRow([F(0)] * 3, None).share(0), "0.3333")
    assert (str(cell), cell.reader) == ("0.3333", "1/3 ~ 0.3333")
    assert reader_text(Cell("0.0000", "masked")) == "masked" and reader_text("x") == "x"


def test_softmax_row_logit_is_a_value():
    row = SoftmaxRow([F(3), F(1)], F(2))
    assert row.logit(F(-2)) == Surd(0, ((F(2), 1),)) and type(row.logit(F(0))) is Surd
    assert row.logit(F(0)) == Surd(0, ((F(2), 3),))
    four = SoftmaxRow([F(3), F(1)], F(4))
    assert four.logit(F(0)) == F(3, 2) and type(four.logit(F(0))) is F
    assert LogSumExp(SoftmaxRow([F(0), None], F(2))).rational() == 0


def test_alibi_formula_follows_its_distance():
    for form, text in (("relative", "-m (p_i - j)"), ("absolute", "m j"),
                       ("symmetric", "-m |p_i - j|")):
        assert Alibi(8, form).formula("p_i") == text
    assert [Alibi(8, f).distance(5, 2) for f in ("relative", "absolute", "symmetric")] == \
        [-3, 2, -3]


def test_one_reader_of_sympy_constants():
    from exactattn.numbers.digits import certify
    e = sympy.atan(1) * 4 + sympy.erf(sympy.Rational(1, 2)) + sympy.sqrt(2) * sympy.E
    assert certify(lambda prec: sympy_ball(e), 8) == f"{sympy.N(e, 30):.8f}"
    with pytest.raises(InputError, match="value must be built from rationals"):
        sympy_ball(sympy.Symbol("x"))
    from exactattn.proofs._support import to_arb
    with pytest.raises(TypeError, match="to_arb cannot evaluate x"):
        to_arb(sympy.Symbol("x"))


def test_one_rule_for_numbers_too_long_to_write():
    """Past 14,000 bits (near Python's 4300-digit limit) every echo writes a size instead."""
    from exactattn.errors import shorten, too_long_to_write
    from exactattn.numbers.digits import fraction_text
    assert not too_long_to_write(2 ** 13_999) and too_long_to_write(F(1, 2 ** 14_000))
    assert shorten(2 ** 14_000) == "<an integer of about 4214 digits>"
    assert shorten([F(1, 2 ** 14_000)]) == "[<a Fraction of thousands of digits>]"
    assert fraction_text(F(1, 10 ** 4300)) == "1/1" + "0" * 4300
