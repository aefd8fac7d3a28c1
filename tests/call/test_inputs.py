"""Bad heads, bad tokens and bad spec files: one library error each, with the fix named."""

import json
from fractions import Fraction
from pathlib import Path

import pytest

from exactattn import FloatInputError, Head, InputError, ShapeError, SpecError, attend
from exactattn.examples import chronicle
from exactattn.engines.spec import load, loads

DATA = Path(__file__).parents[1] / "data"
I2 = [[1, 0], [0, 1]]


@pytest.mark.parametrize("kwargs, error, pattern", [
    (dict(W_Q=I2, W_K=[[1, 0, 0], [0, 1, 0]], W_V=I2), ShapeError,
     r"W_K must be 2 x 2 in the slots layout, to match W_Q \(got 2 x 3\)"),
    (dict(W_Q=[[1, 0], [0, 1], [1, 1]], W_K=I2, W_V=I2, layout="rows"), ShapeError,
     r"W_K must be 3 x 2 in the rows layout, to match W_Q \(got 2 x 2\)"),
    (dict(W_Q=[[1, 0], [1]], W_K=I2, W_V=I2), ShapeError, "equal length"),
    (dict(W_Q=[], W_K=I2, W_V=I2), ShapeError, "at least one row"),
    (dict(W_Q=I2, W_K=I2, W_V=[[1, "x"], [0, 1]]), InputError, r"W_V\[0\]\[1\] must be a number"),
    (dict(W_Q=I2, W_K=I2, W_V=I2, layout="columns"), InputError,
     r"layout must be 'slots' or 'rows' \(got 'columns'\)"),
    (dict(W_Q=I2, W_K=I2, W_V=I2, divisor="0"), InputError, "divisor must be a positive"),
    (dict(W_Q=I2, W_K=I2, W_V=I2, divisor=-2), InputError, "divisor must be a positive"),
    (dict(W_Q=I2, W_K=I2, W_V=I2, divisor="two"), InputError, "divisor must be a positive"),
    (dict(W_Q=[[0.5, 0], [0, 1]], W_K=I2, W_V=I2), FloatInputError, r"W_Q\[0\]\[0\] is a binary float"),
    (dict(W_Q=[["nan", 0], [0, 1]], W_K=I2, W_V=I2), InputError, "must be finite"),
    (dict(W_Q=I2, W_K=I2, W_V=I2, causal="yes"), InputError, "causal must be true or false"),
])
def test_bad_heads(kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        Head(**kwargs)


@pytest.mark.parametrize("x, error, pattern", [
    ([], ShapeError, "at least one token"),
    ([[1, 0, 0]], ShapeError, r"token 1 must have d_model = 2 numbers \(got 3\)"),
    ([[1, 0], [1]], ShapeError, r"token 2 must have d_model = 2 numbers \(got 1\)"),
    ([[0.1, 0]], FloatInputError, r"pass '0.1' as a string"),
    ([[float("inf"), 0]], InputError, "must be finite"),
])
def test_bad_tokens(x, error, pattern):
    with pytest.raises(error, match=pattern):
        attend(Head(I2, I2, I2), x)


def test_errors_are_builtin_subclasses():
    assert issubclass(ShapeError, ValueError)
    assert issubclass(FloatInputError, TypeError) and issubclass(FloatInputError, ValueError)


def test_unknown_engine():
    with pytest.raises(InputError, match="engine must be one of"):
        attend(Head(I2, I2, I2), [[1, 0]], engine="gpu")


def test_spec_files_agree_in_both_layouts():
    ref = chronicle()
    t_ref = attend(ref.head, ref.x)
    for name in ("chronicle_slots.json", "chronicle_rows.toml"):
        ex = load(DATA / name)
        t = attend(ex.head, ex.x)
        assert t.raw_scores == t_ref.raw_scores
        assert t.shares == t_ref.shares and t.outputs == t_ref.outputs
        assert [tok.id for tok in ex.tokens] == [331, 48, 383, 55]


GOOD = {"tokens": [{"x": [1, 0]}], "W_Q": I2, "W_K": I2, "W_V": I2}


@pytest.mark.parametrize("doc, error, pattern", [
    ({**GOOD, "colour": 1}, SpecError, "unknown key 'colour'"),
    ({k: v for k, v in GOOD.items() if k != "W_K"}, SpecError, "W_K is missing"),
    ({**GOOD, "tokens": [[1, 0]]}, SpecError, r'tokens\[0\] must be an object with "x"'),
    ({**GOOD, "tokens": []}, SpecError, "tokens must be a non-empty list"),
    ({**GOOD, "tokens": [{"x": [1, 0], "id": "a"}]}, SpecError, r"tokens\[0\].id must be an integer"),
    ({**GOOD, "layout": "cols"}, InputError, "layout must be"),
    ({**GOOD, "divisor": 0}, InputError, "divisor must be"),
    ({**GOOD, "tokens": [{"x": [1, 0, 1]}]}, ShapeError,
     r"tokens\[0\].x \(token 1\) must have d_model = 2 numbers, the weights' d_model \(got 3\)"),
    ({**GOOD, "tokens": [{"x": [1, "one"]}]}, InputError, r"tokens\[0\].x\[1\] must be a number"),
    ([1, 2], SpecError, "top level must be"),
])
def test_bad_spec_documents(doc, error, pattern):
    with pytest.raises(error, match=pattern):
        loads(json.dumps(doc))


def test_spec_decimal_literals_are_read_from_text():
    ex = loads('{"tokens": [{"x": [0.1, 0.2]}], "W_Q": [[1, 0]], "W_K": [[1, 0]], "W_V": [[1, 0]]}')
    assert [str(v) for v in ex.x[0]] == ["1/10", "1/5"]


@pytest.mark.parametrize("text, fmt, pattern", [
    ('{"tokens": [', "json", "not valid JSON"),
    ('{"tokens": [{"x": [NaN]}], "W_Q": [[1]], "W_K": [[1]], "W_V": [[1]]}', "json",
     r"numbers must be finite \(got NaN\); NaN and infinities have no exact value"),
    ("tokens = [", "toml", "not valid TOML"),
])
def test_truncated_or_bad_spec_text(text, fmt, pattern):
    with pytest.raises(SpecError, match=pattern):
        loads(text, fmt=fmt)


def test_missing_and_unreadable_spec_files(tmp_path):
    with pytest.raises(SpecError, match="must exist"):
        load(tmp_path / "nope.json")
    with pytest.raises(SpecError, match=r"must be a file \(got a directory\)"):
        load(tmp_path)
    bad = tmp_path / "bin.json"
    bad.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(SpecError, match="must be UTF-8"):
        load(bad)


@pytest.mark.parametrize("text, fmt, pattern", [
    ("[" * 100000 + "]" * 100000, "json", "nested too deeply"),
    ('{"tokens": [{"x": [' + "9" * 5000 + ']}], "W_Q": [[1]], "W_K": [[1]], "W_V": [[1]]}',
     "json", r"numbers must have at most 4000 digits \(got an integer of more than 4300\)"),
    ('{"tokens": [{"x": [1]}], "W_Q": [[1]], "W_K": [[1]], "W_V": [[1]], "divisor": null}',
     "json", r"divisor must be .* \(got null\); leave it out for sqrt\(d_k\)"),
    ('tokens = [{x = [1]}]\nW_Q = [[1]]\nW_K = [[1]]\nW_V = [[1]]', "json", "name it .toml"),
])
def test_spec_texts_that_used_to_escape(text, fmt, pattern):
    with pytest.raises(SpecError, match=pattern):
        loads(text, fmt=fmt)


def test_toml_floats_with_underscores_are_exact():
    ex = loads("tokens = [{x = [1_000.5]}]\nW_Q = [[1]]\nW_K = [[1]]\nW_V = [[1]]", fmt="toml")
    assert ex.x == [[Fraction(2001, 2)]] and type(ex.x[0][0]) is Fraction


def test_a_huge_score_gap_prints_at_once():
    ex = loads(json.dumps({"tokens": [{"x": ["1e9", 0]}, {"x": [0, 1]}],
                           "W_Q": I2, "W_K": I2, "W_V": I2, "divisor": "1e-300"}))
    t = attend(ex.head, ex.x)
    assert [t.share(0, j).decimal(6) for j in range(2)] == ["1.000000", "0.000000"]
    assert t.share(1, 1).decimal(4) == "1.0000"


# ----------------------------------------------------------------- one reader for both kinds of spec
from exactattn.call.spec import MAX_BYTES, load_problem, loads_problem, parse  # noqa: E402

PROBLEM = '{"query": [[1]], "key": [[1], [2]], "value": [["1/2"], [3]]}'


def test_problem_spec_toml_floats_are_text():
    problem, policy, dtype = loads_problem(
        'query = [[1_000.5]]\nkey = [[1]]\nvalue = [[0.1]]\n[policy]\nscale = "none"', fmt="toml")
    assert problem.query[0, 0, 0, 0] == Fraction(2001, 2)
    assert type(problem.query[0, 0, 0, 0]) is Fraction
    assert problem.value[0, 0, 0, 0] == Fraction(1, 10)
    assert policy.divisor_squared is None and dtype is None


@pytest.mark.parametrize("text", [
    '{"query": [[1]], "query": [[2]], "key": [[1]], "value": [[1]]}',
    '{"query": [[1]], "key": [[1]], "value": [[1]], "policy": {"causal": true, "causal": false}}',
])
def test_a_repeated_key_is_refused(text):
    with pytest.raises(SpecError, match=r"^spec: key '(query|causal)' must appear once \(got it twice\); remove one$"):
        loads_problem(text)


def test_a_repeated_head_key_is_refused():
    with pytest.raises(SpecError, match="key 'W_Q' must appear once"):
        loads('{"tokens": [{"x": [1]}], "W_Q": [[1]], "W_Q": [[2]], "W_K": [[1]], "W_V": [[1]]}')


def test_a_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + PROBLEM.encode())
    problem, _, _ = load_problem(path)
    assert problem.value[0, 0, 1, 0] == Fraction(3)
    head = tmp_path / "head.json"
    head.write_bytes(b"\xef\xbb\xbf" + json.dumps(GOOD).encode())
    assert load(head).x == [[Fraction(1), Fraction(0)]]
    assert parse("\ufeff[1]") == [1]


def test_files_past_the_size_limit_are_refused(tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(MAX_BYTES + 1)           # sparse: nothing is written
    for path in (big, "/dev/zero"):
        with pytest.raises(SpecError, match=r"must be at most 64 MiB \(got more\)"):
            load_problem(path)
        with pytest.raises(SpecError, match=r"must be at most 64 MiB"):
            load(path)


@pytest.mark.parametrize("text", [
    '{"query": ' + "[" * 100000 + "]" * 100000 + "}",
    '{"query": [[1]], "key": ' + "[" * 900 + "1" + "]" * 900 + ', "value": [[1]]}',
])
def test_deep_problem_specs_are_one_error(text):
    with pytest.raises((SpecError, ShapeError)) as e:
        loads_problem(text)
    assert "\n" not in str(e.value)


def test_each_kind_of_spec_names_the_other():
    with pytest.raises(SpecError, match="this looks like a head spec"):
        loads_problem(json.dumps(GOOD))
    with pytest.raises(SpecError, match="this looks like a verify spec"):
        loads(PROBLEM)


@pytest.mark.parametrize("doc, error, pattern", [
    ({"query": [[1]], "key": [[1]]}, SpecError, "value is missing"),
    ({"query": [[1]], "key": [[1]], "value": [[1]], "policy": {"colour": 1}}, SpecError,
     "unknown policy key 'colour'"),
    ({"query": [[1]], "key": [[1]], "value": [[1]], "policy": {"causal": "yes"}}, InputError,
     r"^spec: causal must be true or false \(got 'yes'\)$"),
    ({"query": [[1]], "key": [[1]], "value": [[1]], "dtype": "float8"}, InputError,
     "dtype must be one of"),
    ({"query": [[1]], "key": [[1]], "value": [[1]], "mask": [[True]]}, SpecError,
     r'mask must be \{"kind": ..., "values": \[...\]\}'),
    ({"query": [[1]], "key": [[1]], "value": [[1]], "policy": {"mask_kind": "bool_keep"},
      "mask": {"kind": "bool_drop", "values": [[True]]}}, SpecError,
     "mask.kind must agree with policy.mask_kind"),
    ({"query": [[1, 2], [3]], "key": [[1]], "value": [[1]]}, ShapeError, "ragged"),
    ({"query": [[0.5]], "key": [[1]], "value": [[1]]}, InputError, None),
])
def test_bad_problem_specs(doc, error, pattern):
    text = json.dumps(doc)
    if pattern is None:           # a bare 0.5 in the file is read from its text: fine
        assert loads_problem(text)[0].query[0, 0, 0, 0] == Fraction(1, 2)
        return
    with pytest.raises(error, match=pattern):
        loads_problem(text)
