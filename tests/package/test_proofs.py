"""The proofs in proofs/: each holds and prints its golden report; each fails on a broken variant.

The model is mpmath's tests/test_demos.py: every file in proofs/ is run (a new
file is picked up without being registered) and its printed report is compared
with tests/golden/proofs/NAME.txt (regenerate with EXACTATTN_UPDATE_GOLDEN=1).
Then every proof is fed a deliberately broken variant of the thing it checks
(a softmax that forgets to normalise, a softmax over the wrong axis, a cost
derivation that drops a term, a divisor of d_k instead of sqrt(d_k), a leaky
causal mask, ...) and must report failure; a correct plain-sympy reference
passes the same proofs, so the failures come from the breakage.
"""

import functools
import io
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
import sympy

from exactattn.properties.gradients import softmax_backward

from exactattn import cost
from exactattn.cli import main
from exactattn.commands import prove

ROOT = Path(__file__).parents[2]
GOLDEN = Path(__file__).parents[1] / "golden" / "proofs"
UPDATE = os.environ.get("EXACTATTN_UPDATE_GOLDEN") == "1"
NAMES = prove.proof_names()


def run_proof(name: str, **variant) -> tuple[bool, str]:
    stream = io.StringIO()
    ok = prove.load_proof(name).run(out=stream, **variant)
    return ok, stream.getvalue()


# broken variants ------------------------------------------------------------
def textbook_softmax(scores):
    """exp(s_j) / sum_k exp(s_k), row by row, in plain sympy (the correct reference)."""
    return [[sympy.exp(s) / sympy.Add(*[sympy.exp(t) for t in row]) for s in row]
            for row in scores]


def unnormalised_softmax(scores):
    """Forgets to divide by the normaliser."""
    return [[sympy.exp(s) for s in row] for row in scores]


def column_softmax(scores):
    """Normalises over the wrong axis: each column sums to 1, not each row."""
    cols = list(zip(*scores))
    return [[sympy.exp(s) / sympy.Add(*[sympy.exp(t) for t in cols[j]])
             for j, s in enumerate(row)] for row in scores]


def linear_normaliser(scores):
    """s_j / sum_k s_k: no exponential (scale invariant, can go negative)."""
    return [[s / sympy.Add(*row) for s in row] for row in scores]


def quiet_softmax(scores):
    """exp(s_j) / (1 + sum_k exp(s_k)): an extra 1 in the normaliser (not shift invariant)."""
    return [[sympy.exp(s) / (1 + sympy.Add(*[sympy.exp(t) for t in row])) for s in row]
            for row in scores]


def textbook_attention(softmax=textbook_softmax, *, visible=None, bias=None):
    """Plain-sympy scaled dot-product attention (slots layout, divisor sqrt(d_k)).

    ``visible(i, j)`` replaces the causal mask; ``bias(i, j)`` is added to
    every raw score (a positional bias).
    """
    def attention(W_Q, W_K, W_V, x, *, causal=False):
        def project(W, v):
            return [sympy.expand(sum(w * e for w, e in zip(row, v))) for row in W]
        queries = [project(W_Q, v) for v in x]
        keys = [project(W_K, v) for v in x]
        values = [project(W_V, v) for v in x]
        n, root = len(x), sympy.sqrt(len(W_Q))
        sees = visible or (lambda i, j: not causal or j <= i)
        raw = [[sympy.expand(sum(a * b for a, b in zip(queries[i], keys[j]))
                             + (bias(i, j) if bias else 0)) if sees(i, j) else None
                for j in range(n)] for i in range(n)]
        shares = []
        for i in range(n):
            seen = [j for j in range(n) if raw[i][j] is not None]
            row = dict(zip(seen, softmax([[raw[i][j] / root for j in seen]])[0]))
            shares.append([row.get(j, sympy.Integer(0)) for j in range(n)])
        outputs = [[sum(shares[i][j] * values[j][c] for j in range(n))
                    for c in range(len(W_V))] for i in range(n)]
        return SimpleNamespace(queries=queries, keys=keys, values=values, raw_scores=raw,
                               shares=shares, outputs=outputs)
    return attention


def derive_without_mixing(causal=False, **options):
    """The cost derivation off by one term: the mixing stage dropped from the total."""
    stages = dict(cost.derive(causal, **options))
    stages["mix"] = sympy.Integer(0)
    stages["total"] = sympy.expand(stages["projections"] + stages["scores"])
    return stages


def column_major_neurons(flat_weights, inputs, width, bias=0):
    """Reads the flat weights with the wrong stride (column by column)."""
    d = len(inputs)
    return [sum(flat_weights[m * width + s] * inputs[m] for m in range(d)) + bias
            for s in range(width)]


BROKEN = {
    "grad_rows_sum_to_zero": [({"backward": lambda p, d: [a * b for a, b in zip(p, d)]},
                               "n = 1: sum_j dS_j: residual")],
    "softmax_jacobian": [({"jacobian": lambda p: [[a * (int(j == k) - a) for k in range(len(p))]
                                                  for j, a in enumerate(p)]},
                          "n = 2: J = d p / d s: residual")],
    "key_bias_gradient": [({"backward": lambda p, d: [a * b for a, b in zip(p, d)]},
                           "n = 1: sum_j dS_j q: residual")],
    "gradient_shift_invariance": [({"backward": lambda s, d: softmax_backward(
        [sympy.exp(x) for x in s], d)}, "n = 1: dS(s + c) - dS(s): residual")],
    "finite_difference": [({"gradient": lambda g, wrt, prec: g.value("dV", 0, 0).ball(prec)},
                           "plain: dL/dQ[1][0]: gradient")],
    "row_sums_to_one": [({"softmax": unnormalised_softmax}, "n = 1: row sum - 1: row 1: residual"),
                        ({"softmax": column_softmax}, "n = 2: row sum - 1: row 1: residual")],
    "shares_positive": [({"softmax": linear_normaliser}, "not positive at a rational point")],
    "shift_invariance": [({"softmax": quiet_softmax}, "n = 1: share(s + c) - share(s): residual")],
    "max_subtraction": [({"maximum": lambda *row: row[0]}, "p = 2: largest power exp(g1), not 1")],
    "doubling_does_not_cancel": [({"softmax": linear_normaliser},
                                  "factor 1, doubling cancels for every row")],
    "divisor_to_infinity": [({"softmax": unnormalised_softmax}, "p = 1: limits [1, 1]")],
    "divisor_to_zero": [({"softmax": column_softmax}, "P = [1]: limits [1, 1]")],
    "same_numbers_same_row": [({"attention": textbook_attention(bias=lambda i, j: -abs(i - j))},
                               "tokens uuw: raw score (1,1) vs (2,1)")],
    "positional_encoding_separates": [({"encoding": lambda pos, d: [sympy.sin(1)] * d},
                                       "score gaps: no gap of rows 2 and 4 differs")],
    "projection_biases": [({"attention": textbook_attention(unnormalised_softmax)},
                           "key bias verdict: shares change, outputs change  [FAILS]")],
    "causal_first_position": [({"attention": textbook_attention(visible=lambda i, j: j <= i + 1)},
                               "symbolic head: masked shares: 6 pairs above the diagonal, "
                               "nonzero at [(1, 2), (2, 3), (3, 4)]")],
    "cost_formula": [({"derive": derive_without_mixing}, "residual -d_k*n**2  [FAILS]")],
    "crossover": [({"derive": derive_without_mixing}, "-3*D + n > 0 iff n > 3*D  [FAILS]")],
    "doubling_ratio": [({"derive": derive_without_mixing},
                        "n = 4 -> 8, D = 4: 5/2 = 2.50  [FAILS]")],
    "score_variance": [({"divisor": lambda d: d},
                        "Var(q . k / d_k) = d_k/(d_k)^2 = 1/d_k  [FAILS]")],
    "expected_spread": [({"divisor": lambda d: d}, "E|q| / d_k -> 0")],
    "neuron_layer": [({"neurons": column_major_neurons}, "the same numbers: false  [FAILS]")],
}

#: proofs parameterised by a softmax or an attention: the plain-sympy reference must pass them
CONTROLS = {
    "row_sums_to_one": {"softmax": textbook_softmax},
    "shares_positive": {"softmax": textbook_softmax},
    "shift_invariance": {"softmax": textbook_softmax},
    "doubling_does_not_cancel": {"softmax": textbook_softmax},
    "divisor_to_zero": {"softmax": textbook_softmax},
    "same_numbers_same_row": {"attention": textbook_attention()},
    "causal_first_position": {"attention": textbook_attention()},
    "projection_biases": {"attention": textbook_attention()},
}


# discovery and the golden reports ----------------------------------------------
def test_every_file_in_proofs_is_a_proof():
    files = sorted(p.stem for p in (ROOT / "proofs").glob("*.py") if not p.name.startswith("_"))
    assert NAMES == files
    assert len(NAMES) >= 14


def test_every_proof_has_a_broken_variant():
    assert sorted(BROKEN) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_proof_states_claim_assumptions_reference(name):
    module = prove.load_proof(name)
    doc = module.__doc__
    for part in ("Claim:", "Assumptions:", "Derivation", "Reference:"):
        assert part in doc, (name, part)
    assert isinstance(module.CLAIM, str) and module.CLAIM
    assert callable(module.run)


@pytest.mark.parametrize("name", NAMES)
def test_proof_holds_and_matches_golden(name):
    ok, text = run_proof(name)
    assert ok is True
    assert text.startswith(f"{name}: ")
    assert text.endswith("  verdict: PROVED\n")
    assert "[FAILS]" not in text
    path = GOLDEN / f"{name}.txt"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing golden file {path}; run with EXACTATTN_UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8")


def test_no_stale_golden_files():
    assert sorted(p.stem for p in GOLDEN.glob("*.txt")) == NAMES


# each proof can fail ---------------------------------------------------------------
@pytest.mark.parametrize("name, variant, evidence",
                         [(name, v, e) for name, cases in BROKEN.items() for v, e in cases],
                         ids=[f"{name}-{i}" for name, cases in BROKEN.items()
                              for i in range(len(cases))])
def test_broken_variant_fails(name, variant, evidence):
    ok, text = run_proof(name, **variant)
    assert ok is False
    assert "  verdict: FAILED (" in text
    assert evidence in text, text


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_plain_sympy_reference_passes(name):
    ok, text = run_proof(name, **CONTROLS[name])
    assert ok is True, text


def test_bias_verdicts_are_derived_from_the_head():
    # the same proof, fed an attention whose key bias does not cancel, reports what it found
    ok, text = run_proof("projection_biases", attention=textbook_attention(quiet_softmax))
    assert ok is False
    assert "key bias verdict: shares change, outputs change  [FAILS]" in text
    assert "query bias verdict: shares change, outputs change  [ok]" in text


# the CLI -----------------------------------------------------------------------------
def test_cli_list(capsys):
    assert main(["prove", "--list"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == NAMES
    assert "row_sums_to_one" in out and err == ""
    assert any(line.endswith(prove.load_proof("crossover").CLAIM) for line in lines)


def test_cli_runs_named_proofs(capsys):
    assert main(["prove", "-q", "shares_positive", "neuron_layer.py"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out == (
        "verdicts (2 proofs):\n"
        "  PROVED  shares_positive  every share is positive, for any real scores\n"
        "  PROVED  neuron_layer     the projection is a row of bias-free neurons: the same "
        "flat weights give the same numbers\n"
        "2 proved, 0 failed\n")


def test_cli_prints_reports_then_verdicts(capsys):
    assert main(["prove", "shares_positive"]) == 0
    out, _ = capsys.readouterr()
    golden = (GOLDEN / "shares_positive.txt").read_text(encoding="utf-8")
    assert out == golden + "\nverdicts (1 proof):\n  PROVED  shares_positive  " \
        "every share is positive, for any real scores\n1 proved, 0 failed\n"


def test_cli_failing_proof_exits_1(capsys, monkeypatch):
    module = prove.load_proof("shift_invariance")
    monkeypatch.setattr(module, "run", functools.partial(module.run, softmax=quiet_softmax))
    assert main(["prove", "-q", "shift_invariance"]) == 1
    out, _ = capsys.readouterr()
    assert "  FAILED  shift_invariance  " in out
    assert out.endswith("0 proved, 1 failed\n")


def test_cli_crashing_proof_is_an_error_not_a_pass(capsys, monkeypatch):
    module = prove.load_proof("neuron_layer")

    def crash(*, out=None):
        raise ZeroDivisionError("division by zero")
    monkeypatch.setattr(module, "run", crash)
    assert main(["prove", "neuron_layer"]) == 1
    out, _ = capsys.readouterr()
    assert "  verdict: ERROR (ZeroDivisionError: division by zero)" in out
    assert "  ERROR   neuron_layer  " in out


@pytest.mark.parametrize("argv", [["prove", "nope"], ["prove", "--list", "nope"],
                                  ["prove", "_support"], ["prove", "shares_positive", "nope"]])
def test_cli_unknown_proof(capsys, argv):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == ("exactattn: error: proof must be the name of a file in proofs/ (got 'nope'); "
                   "`exactattn prove --list` lists them\n").replace(
        "'nope'", repr(argv[-1]))


def test_exit_status_from_the_command_line():
    done = subprocess.run([sys.executable, "-m", "exactattn", "prove", "-q", "neuron_layer"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("1 proved, 0 failed\n")


# packaging ---------------------------------------------------------------------------
def test_proofs_ship_with_the_package():
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "exactattn.proofs" in tool["packages"]
    assert tool["package-dir"]["exactattn.proofs"] == "proofs"
    assert (ROOT / "proofs" / "__init__.py").exists()


def test_docs_list_every_proof_that_prove_runs():
    """docs/proofs.md's table names every proof `exactattn prove` runs, once, and no other."""
    import re
    from pathlib import Path

    from exactattn.commands.prove import proof_names
    text = (Path(__file__).resolve().parents[2] / "docs" / "proofs.md").read_text()
    table = text.split("## The proofs")[1].split("\n## ")[0]
    listed = re.findall(r"^\| `(\w+)` \|", table, flags=re.M)
    assert sorted(listed) == sorted(n.removesuffix(".py") for n in proof_names())
    assert len(listed) == len(set(listed))
    assert f"All {len(listed)} take" in text
