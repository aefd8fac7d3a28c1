"""Notebook display (exactattn.notebook): HTML tables and LaTeX formulas for Jupyter."""

from __future__ import annotations

import re

import pytest

from exactattn import notebook
from exactattn.errors import InputError
from exactattn.examples import bank_river, chronicle
from exactattn.engines.head import Head, attend
from exactattn.notebook import Display, formulas, load_ipython_extension, register, show
from exactattn.present.render import Section
from exactattn.present.tables import attend_example
from exactattn.engines.trace import Trace


def test_a_trace_renders_the_walkthrough_as_html():
    ex = bank_river()
    trace = attend_example(ex)
    d = show(trace, ex)
    html = d._repr_html_()
    captions = re.findall(r"<caption>(.*?)</caption>", html)
    assert captions[0] == "The row: tokens and their numbers"
    assert "Shares (attention weights): softmax of each row" in captions
    assert "<td>0.1941</td><td>0.2764</td><td>0.2764</td><td>0.2530</td>" in html
    assert "<td>1/4 = 0.25</td>" in html           # exact shares marked exact
    assert "<td>river</td>" in html                 # the example's tokens
    assert isinstance(d, Display) and d.trace is trace


def test_a_bare_trace_gets_numbered_tokens():
    trace = attend(Head([[1]], [[1]], [[1]], divisor=None), [[0], [1]])
    html = show(trace)._repr_html_()
    assert "<td>token 2</td>" in html and "<td>1/2 = 0.5</td>" in html


def test_the_formulas_are_exact_closed_forms_with_certified_decimals():
    trace = attend_example(bank_river())
    latex = show(trace)._repr_latex_()
    assert latex.startswith("$$\\begin{aligned}") and latex.endswith("\\end{aligned}$$")
    assert "\\text{share}_{1,1} &= \\frac{1}{4}\\\\" in latex      # exact: no decimal
    assert ("\\text{share}_{3,1} &= \\frac{1}{1 + e^{\\frac{3 \\sqrt{2}}{16}} + "
            "2 e^{\\frac{\\sqrt{2}}{4}}} \\approx 0.1941") in latex
    assert latex.count("\\text{share}_{") == 1 + 4 * 4               # 4 rows of 4 keys
    assert "$$" in show(trace)._repr_html_()   # typeset in the HTML by the notebook too


def test_formulas_cut_long_rows_and_check_rows():
    trace = attend_example(chronicle())
    text = formulas(trace, rows=[1], keys=2)
    assert "\\text{share}_{2,1}" in text and "\\approx 0.5800" in text   # chronicle's 0.5800
    assert "\\text{share}_{2,3}" not in text and "(2 more keys)" in text
    with pytest.raises(InputError, match=r"rows must be query rows from 0 to 3 \(got 4\)"):
        formulas(trace, rows=[4])


def test_sections_render_and_anything_else_is_refused():
    s = Section("demo", "Demo", ["a", "b"], [["1", "x<y"]], ["a note"])
    d = show(s)
    assert "<td>x&lt;y</td>" in d._repr_html_() and d._repr_latex_() is None
    assert show([s, s])._repr_html_().count("<table>") == 2
    assert repr(d).startswith("Demo\n====")
    with pytest.raises(InputError, match="obj must be a Trace, an Example, a Section"):
        show(42)
    with pytest.raises(InputError):
        show([])


class _Formatter:
    def __init__(self):
        self.types = {}

    def for_type(self, cls, func):
        self.types[cls] = func


class _Shell:
    def __init__(self):
        self.display_formatter = type("F", (), {})()
        self.display_formatter.formatters = {"text/html": _Formatter(),
                                             "text/latex": _Formatter()}


def test_the_extension_registers_from_the_presentation_side():
    shell = _Shell()
    load_ipython_extension(shell)
    html = shell.display_formatter.formatters["text/html"].types
    latex = shell.display_formatter.formatters["text/latex"].types
    assert set(html) == {Trace, notebook.Example, Section} and set(latex) == {Trace,
                                                                           notebook.Example}
    trace = attend_example(bank_river())
    assert "<td>0.1941</td>" in html[Trace](trace)
    assert "\\approx 0.2764" in latex[Trace](trace)
    assert not hasattr(Trace, "_repr_html_")    # the engine's type is left alone


def test_register_needs_a_shell(monkeypatch):
    shell = _Shell()
    register(shell)
    assert Trace in shell.display_formatter.formatters["text/html"].types
    ipython = pytest.importorskip("IPython")
    monkeypatch.setattr(ipython, "get_ipython", lambda: None)
    with pytest.raises(InputError, match="register must run inside IPython or Jupyter"):
        register()


def test_a_real_ipython_shell_renders_a_trace():
    pytest.importorskip("IPython")
    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "exactattn.notebook")
    data, _ = shell.display_formatter.format(attend_example(bank_river()))
    assert "<td>0.2530</td>" in data["text/html"]
    assert data["text/latex"].startswith("$$")


def test_the_docs_examples_run():
    """docs/page.md's ``>>>`` examples, as a reader would type them."""
    import doctest
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "docs" / "page.md"
    result = doctest.testfile(str(path), module_relative=False,
                              optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert (result.failed, result.attempted) == (0, 5)
