"""Spec files and walkthrough tables of modified heads: the handed cases through the CLI,
the modifier flags, the kinds of value each table names, and one-line errors."""

import json
from fractions import Fraction as F
from pathlib import Path

import pytest

from exactattn.call.policy import Policy
from exactattn.errors import SpecError
from exactattn.call.modifiers import Alibi, Rope
from exactattn.call.spec import loads_problem, problem_text
from exactattn.engines.spec import HeadSpec, loads
from exactattn.call import Call

CASES = Path(__file__).parents[1] / "data" / "cases"


def case(name):
    return json.loads((CASES / f"{name}.json").read_text())


def head_doc(scores, values, policy=None, **top):
    """A head spec whose raw scores are ``scores`` (one-hot tokens, W_K = I)."""
    n = len(scores[0])
    rows = [list(r) for r in scores] + [["0"] * n] * (n - len(scores))
    doc = {"name": "posed", "divisor": "none",
           "tokens": [{"x": [int(r == c) for c in range(n)]} for r in range(n)],
           "W_Q": [[rows[i][j] for i in range(n)] for j in range(n)],
           "W_K": [[int(r == c) for c in range(n)] for r in range(n)],
           "W_V": [list(values)], **top}
    if policy is not None:
        doc["policy"] = policy
    return doc


@pytest.fixture
def run(cli, tmp_path):
    """``run(doc, mode, *flags)`` -> (rc, out, err) for a head spec written to a file."""
    def go(doc, mode, *flags):
        path = tmp_path / "head.json"
        path.write_text(json.dumps(doc))
        return cli(mode, "--spec", str(path), *flags)
    return go


def tables(out):
    return {t["name"]: t for t in json.loads(out)["tables"]}


def one_line(rc, out, err, text):
    assert rc == 2 and out == "" and err.count("\n") == 1, (rc, err)
    assert err.startswith("exactattn: error: ") and text in err, err


def test_attention_sink_case_through_the_cli(run):
    c = case("attention-sink")
    doc = head_doc(c["input"]["scores"], c["input"]["V"], {"sink": "0"})
    rc, out, err = run(doc, "scores", "--format", "json", "--digits", "6")
    assert rc == 0 and err == ""
    t = tables(out)
    shares = t["scores/shares"]
    assert shares["columns"] == ["query", "key 1", "key 2", "sink", "sum", "largest"]
    assert [round(float(v), 4) for v in shares["data"]["shares_decimal"][0]] == \
        [float(v) for v in c["expected"]["shares_decimal"]]
    assert shares["data"]["sink_shares"][0] == {"exact": "1/(2 + exp(1))", "decimal": "0.211942"}
    assert shares["rows"][0][-2] == "exactly 1 with the sink"
    assert t["scores/outputs"]["data"]["outputs_decimal"][0] == [c["expected"]["output_decimal"]]
    assert t["scores/shares"]["data"]["closed_forms"][0] == {
        "normaliser": "2 + exp(1)", "numerators": ["exp(1)", "1"]}
    rc, text, _ = run(doc, "square")
    assert "Logits: what the softmax reads (scaled score)" in text
    assert "\n1      1      0      0\n" in text and "the sink's logit 0 joins" in text


@pytest.mark.parametrize("h", range(6))
def test_alibi_six_heads_case_spec_and_flags(run, h):
    c = case("alibi-six-heads")
    want = c["expected"]["output_decimal"][h]
    doc = head_doc([["0"] * 3], c["input"]["V"],
                   {"alibi": {"heads": 6}, "head": h, "query_offset": 2})
    rc, out, _ = run(doc, "walkthrough", "--format", "json", "--digits", "6")
    t = tables(out)
    assert rc == 0 and t["scores/outputs"]["data"]["outputs_decimal"][0] == [want]
    alibi = t["square/alibi"]["data"]
    assert alibi["slope"] == c["expected"]["slopes"][h] and alibi["kind"] == "exact rational"
    assert alibi["exact"][0] == [f"-{F(alibi['slope']) * 2}", f"-{alibi['slope']}", "0"]
    rc, flagged, _ = run(head_doc([["0"] * 3], c["input"]["V"]), "walkthrough", "--format",
                         "json", "--digits", "6", "--alibi", "6", "--head", str(h),
                         "--query-offset", "2")
    assert rc == 0 and tables(flagged)["scores/outputs"]["data"]["outputs_decimal"][0] == [want]


def test_alibi_irrational_slope_shown_as_closed_form(run):
    rc, out, _ = run(head_doc([["0"] * 3], ["1", "2", "4"]), "square", "--alibi", "12",
                     "--head", "8", "--query-offset", "2")
    assert rc == 0
    assert "ALiBi biases: -m (p_i - j), slope m = 1/sqrt(2)\n" in out
    assert "head 8 of 12 (relative form): slope m = 1/sqrt(2) ~ 0.7071, exact algebraic" in out
    assert "\n1      -2/sqrt(2) ~ -1.4142  -1/sqrt(2) ~ -0.7071  0\n" in out
    assert "positions: key j (numbered from 1) sits at position j - 1, query i at p_i = i - 1 + 2" \
        in out


def test_softcap_before_mask_case(run):
    c = case("softcap-before-mask")
    doc = head_doc(c["input"]["scores"], ["1", "2", "3"], {"softcap": "1", "window": [None, 1]})
    rc, out, _ = run(doc, "walkthrough", "--format", "json", "--digits", "6")
    t = tables(out)
    assert t["scores/shares"]["data"]["shares_decimal"][0] == \
        c["expected"]["shares_decimal"][:2] + ["0.000000"]
    capped = t["square/capped"]["data"]
    assert capped["exact"][0] == ["0", "tanh(2)", None]
    assert capped["kind"][0] == ["exact rational", "certified transcendental", None]
    assert capped["decimal"][0][1] == "0.964028"
    rc, text, _ = run(doc, "square")
    assert "Capped scores: 1*tanh(scaled / 1) (soft-capping, before biases and masks)" in text
    assert "\n1      0      ~0.9640  -inf\n" in text
    assert "kind: certified transcendental (tanh of a nonzero exact score" in text


def test_sliding_window_case(run):
    c = case("sliding-window")
    doc = head_doc([["0"] * 5] * 5, ["1", "2", "3", "4", "5"], {"window": [2, 0]}, causal=True)
    rc, out, _ = run(doc, "scores")
    assert rc == 0
    for i, want in enumerate(c["expected"]["outputs"], start=1):
        q = F(want)
        cell = want if q.denominator == 1 else f"{want} = {float(q)}"
        assert f"\n{i}      {cell}" in out
    rc, square, _ = run(doc, "square")
    assert "sliding window (left, right) = (2, 0): the query at position p sees keys p - 2 .. p" \
        in square


def test_dropout_case(run):
    c = case("dropout-kept")
    keep = [[True, False, True], [True] * 3, [True] * 3]
    doc = head_doc([["0"] * 3], c["input"]["V"], {"dropout": {"p": "1/3", "keep": keep}})
    rc, out, _ = run(doc, "scores", "--format", "json")
    t = tables(out)
    drop = t["scores/dropout"]["data"]
    assert drop["weights_decimal"][0] == ["0.5000", "0.0000", "0.5000"] and drop["p"] == "1/3"
    assert drop["sums"][0] == {"exact": "1", "decimal": "1.0000"}
    assert drop["sums"][1] == {"exact": "3/2", "decimal": "1.5000"}
    assert t["scores/outputs"]["data"]["outputs_decimal"][0] == ["6.0000"]
    names = list(t)
    assert names.index("scores/dropout") == names.index("scores/shares") + 1
    rc, text, _ = run(doc, "scores")
    assert "\n1      1/2 = 0.5  dropped    1/2 = 0.5  1\n" in text
    assert "\n2      1/2 = 0.5  1/2 = 0.5  1/2 = 0.5  3/2 = 1.5\n" in text
    assert "rows no longer sum to 1" in text
    assert "Outputs: sum_j weights[i][j] * values[j] (weights after dropout)" in text


def test_logsumexp_case_on_request(run):
    c = case("logsumexp")
    doc = head_doc(c["input"]["scores"], ["1", "1", "1"], {"lse": True})
    rc, out, _ = run(doc, "scores", "--format", "json", "--digits", "10")
    lse = tables(out)["scores/lse"]["data"]
    assert lse["base"] == "e" and lse["lse"][0] == {
        "closed_form": "log(exp(1) + exp(2) + exp(3))", "decimal": c["expected"]["lse_decimal"],
        "kind": "certified transcendental"}
    plain = head_doc(c["input"]["scores"], ["1", "1", "1"])
    rc, out2, _ = run(plain, "scores", "--format", "json", "--digits", "10", "--lse", "2")
    assert tables(out2)["scores/lse"]["data"]["lse"][0]["decimal"] == \
        c["expected"]["lse_base2_decimal"]
    rc, none, _ = run(plain, "scores", "--format", "json")
    assert "scores/lse" not in tables(none)
    masked = head_doc(c["input"]["scores"], ["1", "1", "1"], {"query_offset": -1, "lse": "e"},
                      causal=True)
    rc, text, _ = run(masked, "scores")
    assert "\n1      -inf         -inf    -inf (no visible key)\n" in text


def test_rope_tables(run):
    doc = head_doc([["1", "2", "0"], ["0", "1", "3"]], ["1", "2", "4"])
    doc.update({"W_Q": [[1, 0], [0, 1]], "W_K": [[1, 1], [0, 1]], "W_V": [[1, 2]],
                "tokens": [{"x": [1, 0]}, {"x": [0, 1]}]})
    rc, out, _ = run(doc, "walkthrough", "--rope", "100:interleaved",
                     "--format", "json")
    t = tables(out)
    rope = t["square/rope"]["data"]
    assert rope["layout"] == "interleaved" and rope["theta"] == "100"
    assert rope["kind"][0] == ["exact rational", "certified transcendental"]
    assert rope["exact"][0][0] == "1"
    assert t["scores/macs"]["data"]["rotation"] == 16
    assert "square/logits" in t


def test_modifier_flags_override_the_spec_and_errors_are_one_line(run):
    doc = head_doc([["1", "0"]], ["3", "1"], {"sink": "0"})
    _, zero, _ = run(doc, "scores", "--format", "json")
    _, other, _ = run(doc, "scores", "--format", "json", "--sink", "-1")
    assert tables(zero)["scores/shares"]["data"]["sink_shares"][0]["exact"] == "1/(2 + exp(1))"
    assert tables(other)["scores/shares"]["data"]["sink_shares"][0]["exact"] != \
        "1/(2 + exp(1))"
    for flags, text in [
        (["--window", "1"], "--window must be LEFT,RIGHT, whole numbers >= 0 or none"),
        (["--softcap", "0"], "--softcap must be positive (got '0')"),
        (["--softcap", "x"], "--softcap must be a rational number"),
        (["--sink", "0.5e"], "--sink must be a rational number"),
        (["--head", "2"], "--head must come with --alibi"),
        (["--alibi", "2", "--head", "2"], "head must be from 0 to 1 for ALiBi with 2 heads"),
        (["--query-offset", "1"], "--query-offset must come with a causal head"),
        (["--lse", "10"], "--lse must be one of e, 2"),
    ]:
        one_line(*run(doc, "scores", *flags), text)
    one_line(*run(doc, "square", "--lse"), "square takes no option --lse")


@pytest.mark.parametrize("policy, text", [
    ({"window": [-1, 0]}, "policy.window must be [left, right], whole numbers >= 0 or null"),
    ({"softcap": "0"}, "policy.softcap must be positive (got '0')"),
    ({"sink": "abc"}, "policy.sink must be a rational number (got 'abc')"),
    ({"alibi": {"heads": 6, "form": "x"}}, "policy.alibi.form must be one of relative, "),
    ({"alibi": {"form": "relative"}}, "policy.alibi.heads is missing"),
    ({"alibi": 6}, "policy.alibi must be a table {heads, form} (got 6)"),
    ({"alibi": {"heads": 6}, "head": 6}, "policy.head must be from 0 to 5 for ALiBi with 6 heads"),
    ({"rope": {"theta": "-1"}}, "policy.rope.theta must be a positive number"),
    ({"rope": {"layout": "x"}}, "policy.rope.layout must be one of half, interleaved"),
    ({"dropout": {"p": "1/3"}}, "policy.dropout.keep is missing"),
    ({"dropout": {"p": "1", "keep": [[True]]}}, "policy.dropout.p must be a probability"),
    ({"dropout": {"p": "1/3", "keep": [[True, 1], [True, True]]}},
     "policy.dropout.keep[0][1] must be true or false (got 1)"),
    ({"dropout": {"p": "1/3", "keep": [[True]]}}, "policy.dropout.keep must be 2 x 2"),
    ({"lse": "10"}, "policy.lse must be one of e, 2 (got '10')"),
    ({"alibi": {"heads": 0}}, "policy.alibi.heads must be a positive whole number (got 0)"),
    ({"dropout": {"p": "1/3", "keep": "x"}}, "policy.dropout.keep must be 2 x 2"),
    ({"query_offset": "1"}, "policy.query_offset must be a whole number (got '1')"),
    ({"causal": True}, "causal and divisor are top-level keys of a head spec"),
    ({"alignment": "top-left"}, "policy.alignment must be one of top_left, bottom_right"),
    ([1], "policy must be a table/object"),
])
def test_head_spec_policy_errors_name_the_field(run, policy, text):
    doc = head_doc([["1", "0"]], ["3", "1"], policy)
    one_line(*run(doc, "scores"), text)
    with pytest.raises(SpecError) as e:
        loads(json.dumps(doc))
    assert text in str(e.value) and "\n" not in str(e.value)


def test_head_spec_policy_table_builds_the_head():
    doc = head_doc([["1", "0"]], ["3", "1"], {
        "sink": "1/2", "softcap": "0.5", "alibi": {"heads": 2, "form": "symmetric"}, "head": 1,
        "rope": {"theta": "500000"}, "window": [None, 0], "empty_row": "nan", "lse": "2",
        "dropout": {"p": "0.1", "keep": [[True, False], [True, True]]}})
    ex = loads(json.dumps(doc))
    p = ex.head.policy
    assert isinstance(ex, HeadSpec) and ex.lse == "2" and ex.dropout_keep[0] == [True, False]
    assert (p.sink, p.softcap, p.dropout, p.head, p.window, p.empty_row) == \
        (F(1, 2), F(1, 2), F(1, 10), 1, (None, 0), "nan")
    assert p.alibi == Alibi(2, "symmetric") and p.rope == Rope(F(500000), "half")
    assert type(loads(json.dumps(head_doc([["1"]], ["1"])))).__name__ == "Example"


def test_an_empty_policy_table_prints_the_same_tables(run):
    plain = head_doc([["1", "0"], ["2", "1/3"]], ["3", "1"])
    _, a, _ = run(plain, "walkthrough", "--format", "json")
    _, b, _ = run(dict(plain, policy={}), "walkthrough", "--format", "json")
    assert a == b


def test_problem_spec_policy_modifiers_round_trip():
    text = json.dumps({"query": [["1"]], "key": [["1"], ["0"]], "value": [["3"], ["1"]],
                       "policy": {"scale": "none", "sink": "0", "alibi": {"heads": 8},
                                  "head": 3, "query_offset": 1, "softcap": "30",
                                  "rope": {"theta": "10000", "layout": "interleaved"},
                                  "window": [1, None], "lse": "2",
                                  "dropout": {"p": "1/4", "keep": [[True, False]]}}})
    problem, policy, dtype, fields = loads_problem(text, extras=True)
    assert (policy.sink, policy.head, policy.query_offset, policy.softcap, policy.dropout) == \
        (F(0), 3, 1, F(30), F(1, 4))
    assert fields.dropout_keep == [[True, False]] and fields.lse == "2"
    assert len(loads_problem(text)) == 3
    again = loads_problem(problem_text(problem.with_policy(policy)) .replace(
        '"dropout": {\n      "p": "1/4"\n    }', '"dropout": {"p": "1/4", "keep": [[true, false]]}'),
        extras=True)
    assert again[1] == policy
    with pytest.raises(SpecError, match=r"^spec: policy.dropout.keep is missing"):
        loads_problem(problem_text(problem.with_policy(policy)))
    doc = json.loads(problem_text((Call([["1"]], [["1"]], [["2"]])).with_policy(Policy(dropout="1/2")), None))
    assert doc["policy"]["dropout"] == {"p": "1/2"}
