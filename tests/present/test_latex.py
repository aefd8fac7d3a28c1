"""LaTeX output as math: numbers and closed forms in ``$...$`` (sympy's printer), and every
table a command prints compiles in a minimal ``article``.

The compile tests run a real engine (pdflatex or lualatex, whichever is on PATH; ``.ci/run``
installs Debian's texlive-latex-base) and skip without one.  Whatever the machine has, the
math is also checked without an engine: no LaTeX parser ships with the test extra (pylatexenc
is not a dependency), so each ``$...$`` span is checked for balanced ``$`` and braces and
for control sequences outside the few sympy prints for these forms.
"""

import re
import shutil
import subprocess

import pytest

from exactattn.present.render import Cell, Section, latex_cell, render

#: commands whose every table is checked: the table modes of the built-in walkthrough and
#: each other command that writes ``--format latex`` (modified heads and an irrational
#: divisor included)
COMMANDS = [("walkthrough",), ("row",), ("weights",), ("project",), ("square",), ("scores",),
            ("walkthrough", "--example", "tiny"), ("walkthrough", "--no-scale", "--sink", "1/3"),
            ("square", "--alibi", "3", "--head", "2"), ("scores", "--example", "tiny",
                                                         "--softcap", "2"),
            ("backward",), ("cost",), ("scale", "--widths", "4,16", "--trials", "100"),
            ("sweep", "divisor"), ("sweep", "length"), ("verify",), ("audit", "--demo")]
IDS = [" ".join(c) for c in COMMANDS]
#: the control sequences sympy prints for the closed forms these tables hold
MATH_COMMANDS = {"frac", "sqrt", "approx", "infty", "times", "left", "right", "tanh", "cos",
                 "sin", "log", "pi", "cdot"}


@pytest.mark.parametrize("text, tex", [
    ("25/8 = 3.125", r"$\frac{25}{8} = 3.125$"),
    ("sqrt(3)", r"$\sqrt{3}$"),
    ("sqrt(d_k) = sqrt(3)", r"$\sqrt{d_{k}} = \sqrt{3}$"),
    ("1/3 ~ 0.3333", r"$\frac{1}{3} \approx 0.3333$"),
    ("~0.9640", r"$\approx 0.9640$"),
    ("-33*sqrt(2)/50 ~ -0.9334", r"$- \frac{33 \sqrt{2}}{50} \approx -0.9334$"),
    ("-inf", r"$-\infty$"),
    ("exp(3/2)/(1 + exp(3/2))", r"$\frac{e^{\frac{3}{2}}}{1 + e^{\frac{3}{2}}}$"),
    ("exp((1/2)*tanh(2))", r"$e^{\frac{\tanh{\left(2 \right)}}{2}}$"),
    ("exp(25/16)/(2 + exp(3/8) + exp(25/16))",       # the terms keep their printed order
     r"$\frac{e^{\frac{25}{16}}}{2 + e^{\frac{3}{8}} + e^{\frac{25}{16}}}$"),
    ("1/sqrt(2)", r"$\frac{1}{\sqrt{2}}$"),          # not 1 \frac{1}{\sqrt{2}}
    ("exp(1/16)", r"$e^{\frac{1}{16}}$"),            # not 1 \cdot \frac{1}{16}
    ("sqrt(4)", r"$\sqrt{4}$"),                      # unevaluated: not 2
    ("0.5800", "$0.5800$"),                          # decimals verbatim, never re-rounded
    ("-0.1000000000000000000001", "$-0.1000000000000000000001$"),
    ("~1.000000000000000e+4400", r"$\approx 1.000000000000000 \times 10^{4400}$"),
    ("(0, 3, 1/2, -1/4)", "$(0, 3, 1/2, -1/4)$"),     # vector entries as typed
    ("[7.7470, 8.4678]", "$[7.7470, 8.4678]$"),
    ("(2*t^16 + 3)/(4*t^16 + 4) where t = exp(1/16)",
     r"$\frac{2 t^{16} + 3}{4 t^{16} + 4}$ where $t = e^{\frac{1}{16}}$"),
    ("2*exp(1)/(1 + exp(1))^2", r"$\frac{2 e^{1}}{\left(1 + e^{1}\right)^{2}}$"),   # a gradient
    ("masked", "masked"),
    ("sees no key", "sees no key"),
    ("0.5800 at key 1", "0.5800 at key 1"),
    ("t", "t"),                                      # a token's text, not a variable
    ("x1", "x1"),
    ("d_model", r"d\_model"),
    ("~", r"\textasciitilde{}"),
    ("40.0%", r"40.0\%"),
    ("__import__('os')", r"\_\_import\_\_('os')"),    # never evaluated: unknown names
    ("exp(007)", "exp(007)"),                        # sympy would print 7: stays text
    ("(1, 2, ... +3 more)", "(1, 2, ... +3 more)"),
])
def test_cells_as_latex(text, tex):
    assert latex_cell(text) == tex


@pytest.mark.parametrize("p, q", [(25, 8), (-1, 2), (1, 16), (-33, 50), (10 ** 40 + 1, 3)])
def test_a_fraction_prints_as_sympy_prints_it(p, q):
    """Plain fractions (most cells of a big table) skip sympy's parser: same LaTeX."""
    import sympy
    assert latex_cell(f"{p}/{q}") == f"${sympy.latex(sympy.Rational(p, q))}$"


def test_latex_prints_the_readers_text_and_json_the_machines():
    s = Section("demo", "Demo", ["key", "d_k"], [[Cell("0.0000", "masked"),
                                                 Cell("0.5000", "1/2 = 0.5")]],
                ["divisor: sqrt(d_k) = sqrt(4) = 2", "t = exp(1/16); dS_ij = 0 where not listed"])
    assert render([s], "latex") == (
        "\\paragraph{Demo}\n\\begin{tabular}{ll}\n"
        "key & $d_{k}$ \\\\ \\hline\n"
        "masked & $\\frac{1}{2} = 0.5$ \\\\\n\\end{tabular}\n"
        "divisor: $\\sqrt{d_{k}} = \\sqrt{4} = 2$\\par\n"
        "$t = e^{\\frac{1}{16}}$; dS\\_ij = 0 where not listed\\par\n")
    assert render([s], "csv").splitlines()[1] == "demo,0.0000,0.5000"


@pytest.mark.parametrize("note, tex", [
    ("the head's own divisor: 2 = sqrt(4)", r"the head's own divisor: $2 = \sqrt{4}$"),
    ("query 2 of chronicle: raw scores (25/8, 0, 3/4, 0)",
     "query 2 of chronicle: raw scores $(25/8, 0, 3/4, 0)$"),
    ("slope m = 1/4, exact rational; the sink's logit 1/3",
     r"slope m = $\frac{1}{4}$, exact rational; the sink's logit $\frac{1}{3}$"),
    ("~: certified transcendental", r"$\approx$: certified transcendental"),
    ("its closed form ~ its certified decimal", r"its closed form $\approx$ its certified decimal"),
    # plain numbers and words with unknown names stay text
    ("D = d_model = 4, d_k = 4; sum = 9728", r"D = d\_model = 4, d\_k = 4; sum = 9728"),
    ("crossover from n = 7 (n > 3*D/2 = 6)", "crossover from n = 7 (n > 3*D/2 = 6)"),
])
def test_notes_keep_their_words_and_set_their_math(note, tex):
    s = Section("demo", "Demo", [], [], [note])
    assert render([s], "latex") == f"\\paragraph{{Demo}}\n{tex}\\par\n"


def _math_spans(tex: str) -> list[str]:
    spans = []
    for line in tex.splitlines():
        assert line.count("$") % 2 == 0, line
        spans += line.split("$")[1::2]
    return spans


@pytest.mark.parametrize("argv", COMMANDS, ids=IDS)
def test_every_math_span_is_well_formed(cli, argv):
    """Without a LaTeX parser: ``$`` and braces balance, and the spans use only the
    control sequences sympy prints for these forms; the decimals are those of the Markdown
    tables, in the same order (none re-rounded)."""
    rc, tex, err = cli(*argv, "--format", "latex")
    assert rc == 0, err
    spans = _math_spans(tex)
    assert spans, "no math in this output"
    for span in spans:
        depth = 0
        for ch in span:
            depth += {"{": 1, "}": -1}.get(ch, 0)
            assert depth >= 0, span
        assert depth == 0, span
        assert set(re.findall(r"\\([A-Za-z]+)", span)) <= MATH_COMMANDS, span
    if argv[0] not in ("verify", "scale"):            # Monte-Carlo and timing columns
        _, md, _ = cli(*argv, "--format", "markdown")
        assert re.findall(r"\d+\.\d+", tex) == re.findall(r"\d+\.\d+", md)


def _engine():
    return shutil.which("pdflatex") or shutil.which("lualatex")


@pytest.mark.slow
@pytest.mark.skipif(_engine() is None, reason="no LaTeX engine (pdflatex or lualatex) on PATH")
@pytest.mark.parametrize("argv", COMMANDS, ids=IDS)
def test_the_latex_compiles(cli, tmp_path, argv):
    rc, tex, err = cli(*argv, "--format", "latex")
    assert rc == 0, err
    doc = tmp_path / "tables.tex"
    doc.write_text("\\documentclass{article}\n\\usepackage{amsmath}\n\\begin{document}\n"
                   + tex + "\\end{document}\n", encoding="utf-8")
    run = subprocess.run([_engine(), "-interaction=nonstopmode", "-halt-on-error", doc.name],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    errors = [line for line in run.stdout.splitlines() if line.startswith("!")]
    assert run.returncode == 0 and not errors, "\n".join(errors) or run.stdout[-2000:]
    assert (tmp_path / "tables.pdf").stat().st_size > 0
