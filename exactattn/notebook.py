"""Jupyter display: a trace, an example or any tables render as HTML tables and LaTeX formulas.

Two ways in, both from this presentation module (the engine's
:class:`~exactattn.engines.trace.Trace` knows nothing of HTML):

* :func:`show` wraps a trace, an example, a :class:`~exactattn.present.render.Section`
  or a list of them in a :class:`Display`, whose ``_repr_html_`` (the
  walkthrough's tables) and ``_repr_latex_`` (the share formulas of the
  first query rows) Jupyter calls.  The last line of a cell,
  ``show(trace)``, renders.
* ``%load_ext exactattn.notebook`` (or :func:`register`) registers the same
  renderings with IPython's display formatters for ``Trace``, ``Example`` and
  ``Section``, so that a bare ``trace`` at the end of a cell renders too.

Every number is the tables' own: shares and outputs from the trace's bulk
certified path (:meth:`~exactattn.engines.trace.Trace.share_decimals`), exact values
marked as exact; the formulas are the exact closed forms (sympy's LaTeX
printer) with their certified decimals.  Past 16 tokens the tables show the
first 8 queries and keys, as the text tables do.

>>> from exactattn.examples import bank_river
>>> d = show(bank_river())
>>> "<th>key 1</th>" in d._repr_html_(), d._repr_latex_().startswith("$$")
(True, True)
>>> print(formulas(show(bank_river()).trace, rows=[2], keys=2))
$$\\begin{aligned}
\\text{share}_{ij} &= \\frac{\\exp(s_{ij}/\\sqrt{D})}{\\sum_{k} \\exp(s_{ik}/\\sqrt{D})}, \\quad s_{ij} = q_i \\cdot k_j,\\ D = 2\\\\
\\text{share}_{3,1} &= \\frac{1}{1 + e^{\\frac{3 \\sqrt{2}}{16}} + 2 e^{\\frac{\\sqrt{2}}{4}}} \\approx 0.1941\\\\
\\text{share}_{3,2} &= \\frac{e^{\\frac{\\sqrt{2}}{4}}}{1 + e^{\\frac{3 \\sqrt{2}}{16}} + 2 e^{\\frac{\\sqrt{2}}{4}}} \\approx 0.2764\\\\
&\\ldots \\text{ (2 more keys)}
\\end{aligned}$$
"""

from __future__ import annotations

from html import escape as _e
from typing import Sequence

from .present.cells import exact_text
from .errors import InputError, shorten
from .examples import Example, Token
from .present.render import Section, render, tables_html
from .present.stream import View
from .present.tables import attend_example, build
from .engines.trace import Trace

#: the formulas show at most this many query rows and keys per row
FORMULA_ROWS = 4
FORMULA_KEYS = 8


def formulas(trace: Trace, *, rows: Sequence[int] | None = None, keys: int = FORMULA_KEYS,
             places: int = 4) -> str:
    """The softmax formula and the exact shares of query ``rows`` (0-based; default the
    first four) as LaTeX, each with its certified decimal; at most ``keys`` keys a row.

    Raises:
        InputError: a row outside the trace; ``places`` outside 0..50.
    """
    import sympy
    n = trace.n
    rows = list(range(min(n, FORMULA_ROWS))) if rows is None else list(rows)
    for i in rows:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n:
            raise InputError(f"rows must be query rows from 0 to {n - 1} (got "
                             f"{shorten(i, quote=True)}); rows are 0-based")
    d2 = trace.head.divisor_squared
    decimals = trace.share_decimals(places)
    scaled = r"\exp(s_{%s}/\sqrt{D})" if d2 is not None else r"\exp(s_{%s})"
    where = "" if d2 is None else fr",\ D = {exact_text(d2)}"
    lines = [r"\text{share}_{ij} &= \frac{" + scaled % "ij" + r"}{\sum_{k} " + scaled % "ik"
             + r"}, \quad s_{ij} = q_i \cdot k_j" + where]
    for i in rows:
        shown = [j for j in range(n) if trace.raw_score_row(i)[j] is not None]
        for j in shown[:keys]:
            form = sympy.latex(sympy.sympify(trace.share(i, j).closed_form()))
            exact = trace.share(i, j).rational() is not None
            tail = "" if exact else fr" \approx {decimals[i][j]}"
            lines.append(fr"\text{{share}}_{{{i + 1},{j + 1}}} &= {form}{tail}")
        if len(shown) > keys:
            lines.append(fr"&\ldots \text{{ ({len(shown) - keys} more keys)}}")
    return "$$\\begin{aligned}\n" + "\\\\\n".join(lines) + "\n\\end{aligned}$$"


def _as_example(trace: Trace) -> Example:
    return Example(name="trace", title="", head=trace.head,
                   tokens=[Token(f"token {i + 1}") for i in range(trace.n)], x=trace.x)


class Display:
    """Tables (and optionally a trace's formulas) that Jupyter renders.

    ``_repr_html_``: the tables (and the formulas, typeset by the notebook's
    MathJax); ``_repr_latex_``: the formulas (None without a trace);
    ``repr``: the tables as text.
    """

    def __init__(self, sections: Sequence[Section], trace: Trace | None = None,
                 places: int = 4):
        self.sections, self.trace, self.places = list(sections), trace, places

    def _repr_html_(self) -> str:
        body = tables_html(self.sections)
        latex = self._repr_latex_()
        return body if latex is None else \
            body + f'\n<div class="exactattn-formulas">{_e(latex)}</div>'

    def _repr_latex_(self) -> str | None:
        if self.trace is None:
            return None
        return formulas(self.trace, places=self.places)

    def __repr__(self) -> str:
        return render(self.sections, "text")


def show(obj, example: Example | None = None, *, places: int = 4) -> Display:
    """A :class:`Display` of ``obj``: a Trace or an Example (the walkthrough's five
    tables and the share formulas), a Section or a list of Sections (the tables).

    ``example`` names a trace's tokens (default ``token 1``, ``token 2``, ...).

    Raises:
        InputError: anything else.
    """
    if isinstance(obj, Example):
        obj, example = attend_example(obj), obj
    if isinstance(obj, Trace):
        tables = build("walkthrough", example or _as_example(obj), obj, places,
                       closed_forms=False, view=View.of("markdown", obj.n))
        return Display(tables, obj, places)
    if isinstance(obj, Section):
        return Display([obj])
    if isinstance(obj, (list, tuple)) and obj and all(isinstance(s, Section) for s in obj):
        return Display(obj)
    raise InputError(f"obj must be a Trace, an Example, a Section or a list of Sections "
                     f"(got {shorten(type(obj).__name__, quote=True)})")


def load_ipython_extension(ipython) -> None:
    """``%load_ext exactattn.notebook``: traces, examples and sections render by themselves."""
    formatters = ipython.display_formatter.formatters
    for cls in (Trace, Example, Section):
        formatters["text/html"].for_type(cls, lambda obj: show(obj)._repr_html_())
    for cls in (Trace, Example):
        formatters["text/latex"].for_type(cls, lambda obj: show(obj)._repr_latex_())


def register(ipython=None) -> None:
    """Register the displays with the running IPython (see :func:`load_ipython_extension`).

    Raises:
        InputError: no IPython shell is running (use :func:`show` instead).
    """
    if ipython is None:
        try:
            from IPython import get_ipython
            ipython = get_ipython()
        except ImportError:
            pass
    if ipython is None:
        raise InputError("register must run inside IPython or Jupyter (got no running shell); "
                         "outside a notebook use show(trace) and its _repr_html_()")
    load_ipython_extension(ipython)
