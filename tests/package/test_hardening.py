"""Hardening (issue #20): every hostile input is one line and exit status 2 (or one named
exception through the API), never a traceback, a hang or a flood.

One table, one row per kind of failure, each with the minimal input that used to fail:
``(argv or callable, expected, fragment)``.

* argv: a tuple of command-line words, run in-process; ``Spec(text)`` words are
  written to a file first and replaced by its path, ``TMP`` by the test's folder.
  ``expected`` is the exit status (or a set of them); ``fragment`` must be in the
  one-line error (status 2) or in the output.  A refusal is one line on stderr, with
  nothing on stdout, under :data:`MAX_MESSAGE` characters.
* callable: called with the test's folder; ``expected`` is the exception class it
  raises (its message under :data:`MAX_MESSAGE` characters and holding ``fragment``),
  or None when it returns a text holding ``fragment``.

Rows marked ``xfail(strict=True)`` need a change in a module outside this helper's
files (named in the reason); once it lands the row passes and the marker must go.
"""

from __future__ import annotations

import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from exactattn.errors import InputError, SpecError, shorten

#: the longest one-line error any row may print
MAX_MESSAGE = 300
BIG = list(range(200_000))          # a 200,000-element bad list
LONG = "x" * 200_000                # a 200,000-character bad text
QKV = '"query": [[1]], "key": [[1]], "value": [[1]]'


@dataclass(frozen=True)
class Spec:
    """A spec file's text (written to a file of ``suffix`` before the row runs)."""

    text: str | bytes
    suffix: str = ".json"


TMP = object()   # the test's folder


def needs(module: str, change: str):
    return pytest.mark.xfail(strict=True, reason=f"needs {module}: {change} (issue #20 report)")


# ------------------------------------------------------------------------- API callables
def _trace():
    from exactattn.examples import chronicle
    from exactattn.engines.head import attend
    ex = chronicle()
    return attend(ex.head, ex.x)


def _verify(problem, dtype="float32", **policy):
    from exactattn.call.policy import Policy
    from exactattn.verify import verify
    return verify("numpy", problem.with_policy(Policy(**policy)), dtype)


def _problem(query, key=((1,),), value=((1,),)):
    from exactattn.call import Call
    return Call(query, key, value)


def _search(**kw):
    from exactattn.verify import search
    return search("numpy", **kw)


def _random(*args, **kw):
    from exactattn.call import Call
    return Call.random(*args, **kw)


def _problem_doc(**doc):
    from exactattn.call.spec import problem_from_mapping
    return problem_from_mapping({"query": [[1]], "key": [[1]], "value": [[1]], **doc})


def _head_doc(token):
    from exactattn.engines.spec import from_mapping
    return from_mapping({"tokens": [token], "W_Q": [[1]], "W_K": [[1]], "W_V": [[1]]})


def _svg_with_control_characters(tmp):
    """Token texts holding control characters, <, & and a lone surrogate: well-formed XML."""
    from exactattn.engines.spec import loads
    from exactattn.present.svg import picture
    from exactattn.present.tables import attend_example
    ex = loads('{"tokens": [{"text": "a\\u0001b\\u0000\\ud800<&>\\"", "x": [1, 0]}, '
               '{"text": "c\\u001b[31m", "x": [0, 1]}], "W_Q": [[1, 0], [0, 1]], '
               '"W_K": [[1, 0], [0, 1]], "W_V": [[1, 0], [0, 1]]}')
    trace = attend_example(ex)
    for mode in ("scores", "square"):
        ET.fromstring(picture(mode, ex, trace))
    return "well-formed"


def _svg_to_output_path(tmp):
    """--format svg -o PATH writes the picture there, nothing to stdout."""
    from exactattn.cli import main
    path = Path(tmp) / "square.svg"
    assert main(["scores", "--format", "svg", "-o", str(path)]) == 0
    ET.parse(path)
    return "written"


def _deep(depth):
    d = 1
    for _ in range(depth):
        d = [d]
    return d


# ------------------------------------------------------------------------- the table
ROWS = [
    # -- scales that are 0 or infinity in the dtype under test: refused, one line
    pytest.param(("verify", "--scale", "1e300"), 2, "which rounds to inf in float32", id="scale-1e300"),
    pytest.param(("verify", "--scale", "1e-300"), 2, "which rounds to 0 in float32", id="scale-1e-300"),
    pytest.param(("verify", "--scale", "1e-46"), 2, "rounds to 0 in float32", id="scale-under-float32"),
    pytest.param(("verify", "--scale", "1e39", "--dtype", "float16"), 2, "rounds to inf in float16",
                 id="scale-over-float16"),
    pytest.param(("verify", "--spec", Spec('{%s, "policy": {"scale": "1e300"}}' % QKV)), 2,
                 "rounds to inf in float32", id="spec-policy-scale-1e300"),
    pytest.param(("verify", "--spec", Spec('{%s, "policy": {"scale": "1e-300"}}' % QKV)), 2,
                 "rounds to 0 in float32", id="spec-policy-scale-1e-300"),
    pytest.param(lambda tmp: _verify(_problem([[1]]), scale="1e300"), InputError,
                 "scale must round to a finite non-zero float32", id="api-scale-1e300"),
    pytest.param(lambda tmp: _search(examples=2, policy=__import__("exactattn.call.policy").call.Policy(
        scale="1e-300")), InputError, "rounds to 0 in float32", id="api-search-scale-1e-300"),
    # ... finite in float64: checked exactly
    pytest.param(("verify", "--scale", "1e300", "--dtype", "float64", "--n", "2", "--d-k", "1"),
                 {0, 1}, "Summary per dtype", id="scale-1e300-float64"),
    pytest.param(("verify", "--scale", "1e-300", "--dtype", "float64", "--n", "2", "--d-k", "1"),
                 {0, 1}, "Summary per dtype", id="scale-1e-300-float64"),
    pytest.param(("verify", "--scale", "1/sqrt(3e80)", "--dtype", "float64", "--n", "2", "--d-k", "1"),
                 {0, 1}, "Summary per dtype", id="scale-tiny-irrational-float64"),
    pytest.param(lambda tmp: str(_verify(_problem([["1e300"]], [["1e300"], ["-1e300"]], [[1], [2]]),
                                         "float64", scale="none").summary()),
                 None, "'hard': 1", id="api-scores-past-float64"),
    # -- spec files
    pytest.param(("verify", "--spec", Spec('{"query": [[]], "key": [[1]], "value": [[1]]}')), 2,
                 "query must have at least one entry in every dimension (got 1 x 0)", id="spec-empty-row"),
    pytest.param(("verify", "--spec", Spec('{"query": [[%s]], "key": [[1]], "value": [[1]]}' % ("9" * 4400))),
                 2, "numbers must have at most 4000 digits", id="spec-4400-digit-integer"),
    pytest.param(("verify", "--spec", Spec('query = [[%s]]\nkey = [[1]]\nvalue = [[1]]' % ("9" * 4400), ".toml")),
                 2, "numbers must have at most 4000 digits", id="toml-4400-digit-integer"),
    pytest.param(("verify", "--spec", Spec('{"query": [["%s"]], "key": [[1]], "value": [[1]]}' % ("9" * 4400))),
                 2, "query must have at most 4000 digits", id="spec-4400-digit-string"),
    pytest.param(("verify", "--spec", Spec('{"query": %s%s, "key": [[1]], "value": [[1]]}' % ("[" * 3000, "]" * 3000))),
                 2, "nested too deeply to read", id="spec-nested-3000"),
    pytest.param(("verify", "--spec", Spec('query = %s%s\nkey = [[1]]\nvalue = [[1]]' % ("[" * 3000, "]" * 3000), ".toml")),
                 2, "nested too deeply to read", id="toml-nested-3000"),
    pytest.param(lambda tmp: _problem(_deep(100_000)), InputError,
                 "query must have 2, 3 or 4 dimensions", id="api-nested-100000"),
    pytest.param(lambda tmp: _head_doc({"x": _deep(100_000)}), InputError, "tokens[0].x",
                 id="api-head-nested-100000"),
    pytest.param(("verify", "--spec", "/dev/zero"), 2, "must be at most 64 MiB", id="spec-dev-zero"),
    pytest.param(("verify", "--spec", Spec('{"query": [[NaN]], "key": [[1]], "value": [[1]]}')), 2,
                 "numbers must be finite (got NaN); NaN and infinities have no exact value", id="spec-nan"),
    pytest.param(("verify", "--spec", Spec('{"query": [[-Infinity]], "key": [[1]], "value": [[1]]}')), 2,
                 "numbers must be finite (got -Infinity)", id="spec-infinity"),
    pytest.param(("verify", "--spec", Spec("query = [[nan]]\nkey = [[1]]\nvalue = [[1]]", ".toml")), 2,
                 "query must be finite (got 'nan')", id="toml-nan"),
    pytest.param(("verify", "--spec", Spec(b"\xef\xbb\xbf{" + QKV.encode() + b"}")), 0,
                 "result: PASS", id="spec-utf8-bom-accepted"),
    pytest.param(("verify", "--spec", Spec('{"query": [[1]], "query": [[2]], "key": [[1]], "value": [[1]]}')), 2,
                 "key 'query' must appear once (got it twice)", id="spec-repeated-key"),
    pytest.param(("verify", "--spec", Spec("query = [[1]]\nquery = [[2]]\nkey = [[1]]\nvalue = [[1]]", ".toml")),
                 2, "not valid TOML", id="toml-repeated-key"),
    # -- option values
    pytest.param(("verify", "--digits", "5000"), 2, "--digits must be a whole number from 1 to 50 (got '5000')",
                 id="digits-5000"),
    pytest.param(("verify", "--digits", "100000"), 2, "--digits must be a whole number from 1 to 50",
                 id="digits-100000"),
    pytest.param(("verify", "--search", "5", "--max-size", "100000"), 2,
                 "--max-size must be at most 32 (got 100000)", id="search-max-size-100000"),
    pytest.param(lambda tmp: _search(examples=5, max_size=100_000), InputError,
                 "max_size must be at most 32", id="api-search-max-size-100000"),
    pytest.param(("verify", "--dtype", "float32,float32"), 2, "--dtype must name each dtype once",
                 id="dtype-repeated"),
    # -- sizes: each estimated before anything runs and refused past the limit
    pytest.param(("verify", "--n", "100000000"), 2,
                 "the random inputs must take at most about 60 s and 1 GiB to check exactly", id="n-1e8"),
    pytest.param(("verify", "--n", "3000", "--d-k", "3000"), 2, "the random inputs must take",
                 id="n-3000-d-k-3000"),
    pytest.param(("verify", "--n", "3000", "--d-k", "1"), 2, "about 29 s and 2.5 GiB", id="n-3000-pairs-memory"),
    pytest.param(("verify", "--heads", "1000000"), 2, "H_q=1000000 H_kv=1000000", id="heads-1e6"),
    pytest.param(("verify", "--n", "9" * 4000), 2, "L=more than 10^", id="n-4000-digits"),
    pytest.param(("verify", "--search", "1000000"), 2,
                 "--search must take at most about 60 s with --max-size 4", id="search-1e6"),
    pytest.param(lambda tmp: _search(examples=10 ** 6), InputError, "examples must take at most",
                 id="api-search-1e6"),
    pytest.param(lambda tmp: _random(100_000_000), InputError,
                 "must hold at most 1048576 numbers in all", id="api-random-problem-1e8"),
    pytest.param(lambda tmp: _problem(np.zeros((1100, 1000)).tolist()), InputError,
                 "query, key, value and mask must hold at most 1048576 numbers", id="api-problem-1.1e6"),
    pytest.param(lambda tmp: _verify(_problem([[1]] * 3000, [[1]] * 3000, [[1]] * 3000)), InputError,
                 "problem must take at most about 60 s and 1 GiB", id="api-verify-3000-pairs"),
    pytest.param(("verify", "--spec", Spec('{"query": %s, "key": %s, "value": %s}' % ((str([[1]] * 3000),) * 3))),
                 2, "the problem of ", id="spec-3000-pairs"),
    # -- echoes of a bad value stay short: a 200,000-element list or text
    pytest.param(("verify", "--dtype", LONG), 2, "--dtype must be float64", id="cli-long-dtype"),
    pytest.param(("verify", "--spec", LONG), 2, "spec file 'xxxxxxxx", id="cli-long-spec-path"),
    pytest.param(("verify", "--spec", Spec('{%s, "policy": {"%s": 1}}' % (QKV, LONG))), 2,
                 "unknown policy key 'xxxx", id="cli-long-policy-key"),
    pytest.param(("scores", "--spec", Spec('{"tokens": [{"x": [1], "id": %s}], "W_Q": [[1]], "W_K": [[1]], '
                                           '"W_V": [[1]]}' % BIG)), 2,
                 "tokens[0].id must be an integer (got [0, 1, 2", id="cli-200k-token-id"),
    pytest.param(("verify", "--spec", Spec('{%s, "policy": {"causal": %s}}' % (QKV, BIG))), 2,
                 "causal must be true or false", id="cli-200k-policy-causal"),
    pytest.param(lambda tmp: _problem_doc(policy=BIG), SpecError,
                 "policy must be a table/object (got [0, 1, 2", id="api-200k-policy"),
    pytest.param(lambda tmp: _problem_doc(mask={"kind": BIG, "values": [[True]]},
                                          policy={"mask_kind": "additive"}), SpecError,
                 "mask.kind must agree with policy.mask_kind (got [0, 1, 2", id="api-200k-mask-kind"),
    pytest.param(lambda tmp: _head_doc({"x": [1], "id": BIG}), SpecError,
                 "tokens[0].id must be an integer (got [0, 1, 2", id="api-200k-token-id"),
    pytest.param(lambda tmp: _verify(_problem([["1e3999"]])), InputError,
                 "inputs must fit in float32 (got 1000", id="api-4000-digit-overflow"),
    pytest.param(lambda tmp: _verify(_problem([["9" * 3990 + "e3999"]])), InputError,
                 "(got a number of about 7989 digits, which overflows)", id="api-7989-digit-overflow"),
    pytest.param(lambda tmp: _problem([BIG + ["x"]]), InputError, "query must be a number",
                 id="api-200k-bad-entry"),
    pytest.param(lambda tmp: _problem([[LONG]]), InputError, "query must be a number",
                 id="api-long-bad-entry"),
    pytest.param(lambda tmp: __import__("exactattn.call.policy").call.Policy(causal=BIG), InputError,
                 "causal must be true or false", id="api-200k-causal"),
    pytest.param(("verify", "--" + LONG), 2, "verify takes no option", id="cli-long-option"),
    pytest.param(("verify", "--impl", LONG + ":f"), 2, "must be importable", id="cli-long-impl-module"),
    pytest.param(lambda tmp: shorten(BIG), None, "[0, 1, 2, 3, 4, 5, 6, 7, ...]", id="shorten-200k"),
    # -- reports: right numbers, right grammar
    pytest.param(("verify", "--dtype", "all", "--timings"), 0,
                 "bfloat16 skipped: numpy does not run it", id="dtype-all-numpy"),
    pytest.param(("verify", "--n", "1", "--d-k", "1", "--worst", "1"), 0,
                 "numpy in float32: the 1 worst output against", id="one-worst-output"),
    pytest.param(("verify", "--search", "1", "--seed", "1"), {0, 1}, "search: 1 input, largest error",
                 id="search-one-input"),
    # -- SVG pictures and the one Trace's indices
    pytest.param(_svg_with_control_characters, None, "well-formed", id="svg-control-characters"),
    pytest.param(_svg_to_output_path, None, "written", id="svg-output-path"),
    pytest.param(lambda tmp: _trace().share(5, 5), IndexError,
                 "query index must be from 0 to 3 (got 5)", id="trace-share-5-5"),
    pytest.param(lambda tmp: _trace().share(-1, 0), IndexError,
                 "query index must be from 0 to 3 (got -1)", id="trace-share-negative"),
    pytest.param(lambda tmp: _trace().output(0, -1), IndexError,
                 "value column must be from 0 to 3 (got -1)", id="trace-output-negative"),
    pytest.param(lambda tmp: _trace().share(BIG, 0), IndexError, "query index must be from 0 to 3",
                 id="trace-share-200k-index"),
    pytest.param(lambda tmp: _trace().row(9), IndexError, "query index must be from 0 to 3 (got 9)",
                 id="trace-row-9"),
    pytest.param(lambda tmp: _trace().scaled_score(0, -1), IndexError,
                 "key index must be from 0 to 3 (got -1)", id="trace-scaled-score-negative"),
]


def _argv(row, tmp_path: Path) -> list[str]:
    argv = []
    for i, word in enumerate(row):
        if isinstance(word, Spec):
            path = tmp_path / f"spec{i}{word.suffix}"
            if isinstance(word.text, bytes):
                path.write_bytes(word.text)
            else:
                path.write_text(word.text, encoding="utf-8")
            word = str(path)
        argv.append(str(tmp_path) if word is TMP else word)
    return argv


@pytest.mark.parametrize("call, expected, fragment", ROWS)
def test_hostile_input(call, expected, fragment, tmp_path, cli):
    if callable(call):
        if expected is None:
            assert fragment in call(tmp_path)
            return
        with pytest.raises(expected) as info:
            call(tmp_path)
        message = str(info.value)
        assert len(message) < MAX_MESSAGE, message[:MAX_MESSAGE]
        assert fragment in message, message
        return
    started = time.process_time()    # CPU time: the limit holds on a loaded machine too
    rc, out, err = cli(*_argv(call, tmp_path))
    assert time.process_time() - started < 20
    assert rc in (expected if isinstance(expected, set) else {expected}), (rc, err[-MAX_MESSAGE:])
    assert "Traceback" not in err
    if rc == 2:
        assert out == "" and err.count("\n") == 1 and err.startswith("exactattn: error: "), err[:500]
        assert len(err.replace(str(tmp_path), "TMP")) < MAX_MESSAGE, err[:MAX_MESSAGE]  # paths vary
        assert fragment in err, err
        assert "as strings" not in err and "rounded to 0 places" not in err
    else:
        assert fragment in out, out[-2000:]


def test_dtype_all_timings_column(cli):
    """--dtype all with numpy: one summary row per dtype it runs, each timed impl/exact/judge."""
    import re
    rc, out, _ = cli("verify", "--dtype", "all", "--timings")
    summary = out.split("Summary per dtype")[1].split("result:")[0]
    rows = [line.split() for line in summary.splitlines() if line.startswith("float")]
    assert [r[0] for r in rows] == ["float64", "float32", "float16"]
    assert all(re.fullmatch(r"\d+\.\d\d/\d+\.\d\d/\d+\.\d\d", r[-1]) for r in rows), rows


def test_grammar_of_counts_in_verify_reports(cli):
    """No "1 ULPs" or "the 1 worst outputs": a count of one takes the singular."""
    _, out, _ = cli("verify", "--n", "1", "--d-k", "1", "--worst", "1", "--max-ulps", "1")
    assert "the 1 worst output against" in out and "tolerance: 1 ULP by either count" in out
    for bad in ("1 worst outputs", " 1 ULPs", " 1 inputs", " 1 visible pairs", " 1 FLOPs"):
        assert bad not in out


@pytest.mark.slow
def test_search_writes_nothing_into_the_current_directory(tmp_path):
    """verify --search leaves the folder it runs in empty (no .hypothesis/ constants cache)."""
    done = subprocess.run([sys.executable, "-m", "exactattn", "verify", "--search", "3"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    assert "search: 3 inputs" in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == []
