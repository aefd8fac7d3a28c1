"""Hostile specs through every table command and ``verify --spec``: exit 0 or 2, one line, bounded work.

The CI profile draws a modest number of specs; ``--hypothesis-profile=fuzz`` draws 5,000
per command (set ``EXACTATTN_FUZZ_STATS=FILE`` to tally exit codes and seconds per
input, with the spec of any input over a second).  Work is bounded by precision, not
wall time: certified rounding is allowed at most 2^14 bits here, so an input that
needed exp to astronomic precision would fail.
"""

import contextlib
import io
import os
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exactattn.numbers import digits
from exactattn.cli import main

from specfuzz import FLAG_VALUES, spec_texts, valid_specs

COMMANDS = [["walkthrough", "--format", "json"], ["walkthrough"], ["scores", "--format", "csv"],
            ["square", "--format", "markdown"], ["project", "--format", "latex"], ["row"],
            ["scores", "--format", "svg"]]


def run(argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:       # argparse's own refusals leave this way, status 2
            code = e.code
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(autouse=True)
def bounded_precision(monkeypatch):
    monkeypatch.setattr(digits, "MAX_PREC", 1 << 14)


def _check(tmp_path_factory, text, suffix, argv_of):
    path = tmp_path_factory.mktemp("spec") / f"spec{suffix}"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    start = time.perf_counter()
    code, out, err = run(argv_of(str(path)))
    stats = os.environ.get("EXACTATTN_FUZZ_STATS")   # a file to tally a large fuzz run in
    if stats:
        seconds = time.perf_counter() - start
        with open(stats, "a", encoding="utf-8") as f:   # the spec itself when it was slow
            f.write(f"{argv_of('SPEC')[0]}\t{code}\t{seconds:.4f}\t{len(err.strip())}"
                    f"{chr(9) + ascii(err.strip()) if len(err.strip()) > 300 else ''}"
                    f"{chr(9) + ascii(text) if seconds > 1 else ''}\n")
    assert code in (0, 2), (code, err[-2000:])
    assert "Traceback" not in err
    warned = [w for w in err.splitlines() if w.startswith("exactattn: warning: ")]
    assert all(len(w.replace(str(path), "SPEC")) <= 300 for w in warned), warned
    err = "".join(w + "\n" for w in err.splitlines() if w not in warned)
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("exactattn: error: "), err[-2000:]
        assert len(lines[0].replace(str(path), "SPEC")) <= 300, lines[0][:400]
    return code, out


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
          deadline=None)
@given(spec=spec_texts())
def test_table_commands_never_give_a_traceback(command, spec, tmp_path_factory):
    text, suffix = spec
    _check(tmp_path_factory, text, suffix, lambda p: [*command, "--spec", p])


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
          deadline=None)
@given(spec=spec_texts())
def test_verify_spec_never_gives_a_traceback(spec, tmp_path_factory):
    text, suffix = spec
    _check(tmp_path_factory, text, suffix, lambda p: ["verify", "--spec", p])


MODIFIER_FLAGS = ["--sink", "--softcap", "--query-offset", "--scale", "--digits"]


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
          deadline=None)
@given(spec=valid_specs(), flags=st.lists(st.tuples(st.sampled_from(MODIFIER_FLAGS), FLAG_VALUES),
                                          min_size=1, max_size=3),
       command=st.sampled_from(COMMANDS + [["verify"], ["verify", "--dtype", "float64"]]),
       joined=st.booleans())
def test_modifier_flags_never_give_a_traceback(spec, flags, command, joined, tmp_path_factory):
    """Option values as a user types them (``--sink -1e3``, ``--softcap 1e3000``), each
    with or without ``=``, on every command: exit 0 or 2, one line."""
    import json
    words = [w for f, v in flags for w in ((f"{f}={v}",) if joined else (f, v))]
    if command[0] == "verify":
        _check(tmp_path_factory, "{}", ".json", lambda p: [*command, "--n", "4", *words])
        return
    words = [w for w in words if not w.startswith("--scale")]
    _check(tmp_path_factory, json.dumps(spec), ".json", lambda p: [*command, "--spec", p, *words])


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
          deadline=None, max_examples=25)
@given(spec=spec_texts())
def test_reruns_are_byte_identical(spec, tmp_path_factory):
    text, suffix = spec
    first = _check(tmp_path_factory, text, suffix, lambda p: ["walkthrough", "--spec", p])
    second = _check(tmp_path_factory, text, suffix, lambda p: ["walkthrough", "--spec", p])
    assert first == second


#: option values as users type them, beside FLAG_VALUES: matrices with negative entries
#: (``--d-out '-1,0;0,1'``), ranges, lists, pairs, names
OPTION_TEXTS = st.sampled_from(["-1,0;0,1", "1;0", "-1", "1..4", "4..1", "1,,2", "2,1", "-0,0",
                                "1,0,0,0", ";", "0x", "float16", "nope", "10000:interleaved",
                                "-3:2", "1e400", "99999999999999999999", "1/0", "nan", " "])
#: each command's cheapest run (the options drawn go after it); heavy work is bounded by
#: the values' checks, and a run over 5 s fails
BASES = {"row": [], "weights": [], "project": [], "square": [], "scores": [], "walkthrough": [],
         "verify": ["--n", "4"], "cost": [], "scale": ["--widths", "2", "--trials", "2"], "sweep divisor": [],
         "sweep length": ["--lengths", "2"], "page": ["-o", "OUT"],
         "backward": [], "blocks": ["--example", "tiny"]}


def _value_options(command: str) -> list[str]:
    import argparse

    from exactattn.cli import build_parser
    parser = build_parser()
    for word in command.split():
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[word]
    return sorted(a.option_strings[-1] for a in parser._actions
                  if a.option_strings and a.nargs != 0 and a.dest not in ("help", "output"))


@pytest.mark.parametrize("command", sorted(BASES))
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
          deadline=None)
@given(data=st.data())
def test_every_commands_option_values_never_give_a_traceback(command, data, tmp_path_factory):
    """Every option that takes a value, on every command, with values as users type them
    (negative numbers and matrices among them, with or without ``=``): exit 0 or 2 with one
    line, never a traceback, within 5 s."""
    options = _value_options(command)
    drawn = data.draw(st.lists(st.tuples(st.sampled_from(options), FLAG_VALUES | OPTION_TEXTS,
                                         st.booleans()), min_size=1, max_size=2))
    out = tmp_path_factory.mktemp("out") / "out.html"
    base = [str(out) if w == "OUT" else w for w in BASES[command]]
    words = [w for o, v, joined in drawn for w in ((f"{o}={v}",) if joined else (o, v))]
    start = time.process_time()             # this process's CPU: a loaded machine does not count
    code, _, err = run([*command.split(), *base, *words])
    assert time.process_time() - start < 5, words
    assert code in (0, 1, 2), (words, err[-2000:])
    assert "Traceback" not in err, (words, err[-2000:])
    errors = [line for line in err.splitlines() if line.startswith("exactattn: error: ")]
    assert code != 2 or len(errors) == 1, (words, err[-2000:])

