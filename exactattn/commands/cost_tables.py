"""The cost tables in words: the ``cost`` and ``cost/conventions`` sections, formulas spelled out.

Presentation only: the figures come from :mod:`exactattn.cost.rows` and
:mod:`exactattn.cost.conventions`; this module turns them into
:class:`~exactattn.present.render.Section` tables (rows of text, notes, JSON data)
for ``exactattn cost``.

>>> s = cost_sections()[0]
>>> [r[:6] for r in s.rows]  # doctest: +NORMALIZE_WHITESPACE
[['4', '192', '128', '320', '-', '40.0%'], ['8', '384', '512', '896', '2.80', '57.1%'],
 ['16', '768', '2048', '2816', '3.14', '72.7%'], ['32', '1536', '8192', '9728', '3.45', '84.2%']]
>>> from exactattn.cost.solve import crossover
>>> crossover_text(crossover(4))
'the pairs pass the projections from n = 7 (n > 3*D/2 = 6); at n = 6 the two are equal: 288 and 288'
"""

from __future__ import annotations

from fractions import Fraction

import sympy

from ..numbers.digits import fraction_text, round_fraction
from ..options import check_whole
from ..present.render import Section
from ..cost.conventions import CONVENTION_NOTES, compare_conventions
from ..cost.derivation import EXTENSION_SYMBOLS, SYMBOLS
from ..cost.rows import CostRows, FormulaCheck, cost_rows
from ..cost.sizes import MAX_SIZE, CallShape, size
from ..cost.solve import Crossover

# the order symbols are written in: n, m, t, h, L, D, d_k, d_v
_ORDER = {s: k for k, s in enumerate(
    (SYMBOLS.n, EXTENSION_SYMBOLS.m, EXTENSION_SYMBOLS.t, EXTENSION_SYMBOLS.h,
     EXTENSION_SYMBOLS.L, SYMBOLS.D, SYMBOLS.d_k, SYMBOLS.d_v))}


def _factor_key(f):
    base = f.as_base_exp()[0]
    if base.is_Symbol:
        return (0, _ORDER.get(base, 99), str(base))
    return (1, 0, sympy.sstr(f))


def _term_key(t):
    syms = sorted((_ORDER.get(s, 99) for s in t.free_symbols)) or [100]
    return (syms, sympy.sstr(t))


def spell(e, values: dict | None = None) -> str:
    """A polynomial written with ' x ' (symbols, or their values), e.g. '3 x n x D x d_k'.

    A sum starts with its first positive term and subtracts the negative ones:
    ``n x d_k x (2 x m - n + 1)``, never ``(-1 x n + 2 x m + 1)``.

    >>> n, D, d_k, d_v = SYMBOLS
    >>> spell(3 * n * D * d_k), spell(3 * n * D * d_k, {n: 32, D: 4, d_k: 4})
    ('3 x n x D x d_k', '3 x 32 x 4 x 4')
    """
    if e.is_Add:
        terms = sorted(e.args, key=_term_key)
        first = next((k for k, t in enumerate(terms) if not t.could_extract_minus_sign()), 0)
        terms.insert(0, terms.pop(first))
        text = ""
        for k, t in enumerate(terms):
            negative = t.could_extract_minus_sign()
            body = spell(-t if negative else t, values)
            text += ("-" if negative else "") + body if k == 0 else \
                (" - " if negative else " + ") + body
        return text
    coeff, factors = e.as_coeff_mul()
    coeff = sympy.Rational(coeff)
    if coeff < 0:
        return "-" + spell(-e, values)
    parts = [] if coeff.p == 1 and factors else [str(coeff.p)]
    for f in sorted(factors, key=_factor_key):
        base, exp = f.as_base_exp()
        if base.is_Symbol:
            atom = str(values[base]) if values and base in values else str(base)
        else:
            atom = "(" + spell(base, values) + ")"
        parts.extend([atom] * int(exp))
    text = " x ".join(parts)
    return text + (f" / {coeff.q}" if coeff.q != 1 else "")


def crossover_text(c: Crossover) -> str:
    """The crossover in one sentence (the ``crossover:`` note of the ``cost`` table)."""
    v = c.variable
    linear = "the projections and W_O" if c.with_out_projection else "the projections"
    text = f"the pairs pass {linear} from {v} = {c.first} ({sympy.sstr(c.condition)}"
    text += ")" if c.threshold == c.condition.rhs else f" = {c.threshold})"
    if c.equal_at is not None:
        a, b = c.at(c.equal_at)
        text += f"; at {v} = {c.equal_at} the two are equal: {a} and {b}"
    return text


def _setup_text(s: CallShape, keys: int | None) -> str:
    parts = [f"D = d_model = {s.d_model}, d_k = {s.d_k}, d_v = {s.d_v}",
             f"{s.heads} heads with W_O ({s.heads} x {s.d_v} -> {s.d_model})"
             if s.out_projection else "one head, no W_O"]
    parts += [f"{s.layers} layers"] * (s.layers != 1) + [f"{keys} keys"] * (keys is not None)
    if s.decode:
        parts.append("decoding one token at a time with a KV cache (causal by construction: "
                     "token t attends to the t tokens so far"
                     + ("; that is the causal mask asked for" if s.policy.causal else "") + ")")
    elif s.policy.causal:
        parts.append(f"causal mask ({s.policy.alignment})")
    else:
        parts.append("no mask")
    return "; ".join(parts)


def _check_notes(check: FormulaCheck | None) -> list[str]:
    if check is None:
        return ["check: no row was small enough to run (raise --count-limit); "
                "every figure above is derived, none counted"]
    lines = [f"check at n = {check.n}:"] + [
        f"  {spell(e)} = {spell(e, check.values)} = {v}"
        for e, v in ((check.linear, check.linear_value), (check.pairs, check.pairs_value))]
    lines += [f"  sum = {check.total}", f"  counted by the head = {check.counted_total}",
              f"  same: {str(check.same).lower()}"]
    if check.step_total is not None:
        lines.append(f"  token t costs {spell(check.step_total)} MACs; summed over the "
                     f"generation = causal prefill count ({check.prefill_total}): "
                     f"{str(check.prefill_total == check.counted_total).lower()}")
    return lines


def _cost_section(c: CostRows) -> Section:
    s = c.shape
    with_out = s.out_projection
    cols = ["tokens", "projection MACs"] + (["W_O MACs"] if with_out else []) + \
        ["pair MACs", "total", "ratio to row above", "pair share", "source"]
    out_rows, data_rows = [], []
    prev = None
    for r in c.rows:
        source = "counted" if r.counted else \
            f"derived (not run: over {c.count_limit} MACs)"
        total, pairs = r.figures["total"], r.figures["scores"] + r.figures["mix"]
        ratio = "-" if prev is None else round_fraction(Fraction(total, prev), 2)
        share = round_fraction(Fraction(100 * pairs, total), 1) + "%"
        cells = [str(r.tokens), str(r.figures["projections"])]
        if with_out:
            cells.append(str(r.figures["out_projection"]))
        out_rows.append(cells + [str(pairs), str(total), ratio, share, source])
        data_rows.append(dict(r.figures, tokens=r.tokens, pairs=pairs,
                              source=source.split()[0], derived=r.derived))
        prev = total
    notes = [_setup_text(s, c.keys) + "; multiply-adds (FLOPs = 2 x MACs); "
             f"rows of at most {c.count_limit} MACs (the count limit) are run and counted, "
             "larger ones only derived"]
    notes += _check_notes(c.check)
    if c.crossover is not None:
        notes.append("crossover: " + crossover_text(c.crossover))
    if c.doubling is not None:
        d, last = c.doubling, c.rows[-1].tokens
        notes.append(
            f"doubling: cost(2n)/cost(n) = {sympy.sstr(d.expr)} -> {d.limit} "
            f"as n grows; from {last} to {2 * last} tokens at D = {s.d_model}: "
            f"{round_fraction(d.at(last, s.d_model), 2)}; from 1000 to 2000 tokens "
            f"at D = 4096: {round_fraction(d.at(1000, 4096), 2)}, not close to {d.limit}")
    cross = c.crossover
    data = {"d_model": s.d_model, "d_k": s.d_k, "d_v": s.d_v, "causal": s.policy.causal,
            "alignment": s.policy.alignment, "keys": c.keys,
            "heads": s.heads if with_out else None, "layers": s.layers, "decode": s.decode,
            "count_limit": c.count_limit,
            "rows": data_rows,
            "crossover": None if cross is None else
            {"first": cross.first, "equal_at": cross.equal_at,
             "condition": sympy.sstr(cross.condition)}}
    title = "Cost at several row lengths (multiply-adds counted in the loops)"
    if s.decode:
        title = "Cost of generating n tokens with a KV cache (summed per token)"
    return Section("cost", title, cols, out_rows, notes, data)


def cost_sections(rows=(4, 8, 16, 32), d_model=4, d_k=4, d_v=None, **options) -> list:
    """The ``cost`` table: the same head at several row lengths, counted (or derived).

    Columns: tokens; projection MACs; (W_O MACs); pair MACs; total; ratio to
    the row above; the pairs' share of the total; whether the row was counted
    by running the head or, when its derived total exceeds ``count_limit``,
    only derived.  Notes: the check at the last counted row, the crossover,
    the doubling ratio.  Figures from :func:`~exactattn.cost.rows.cost_rows`
    (``options``: its causal, alignment, keys, heads, layers, decode, count_limit).

    Raises:
        InputError: as :func:`~exactattn.cost.rows.cost_rows`; a size over
            :data:`~exactattn.cost.sizes.MAX_SIZE` (its figures would not print).
    """
    _printable(rows, "each row", d_model, d_k, d_v, options)
    return [_cost_section(cost_rows(rows, d_model, d_k, d_v, **options))]


def _printable(rows, row_name: str, d_model, d_k, d_v, options: dict) -> None:
    """Refuse sizes whose figures could not be printed (more than 4300 digits)."""
    listed = [(row_name, r) for r in (rows if isinstance(rows, (list, tuple)) else ())]
    for name, value in listed + [("d_model", d_model), ("d_k", d_k), ("d_v", d_v)] + [
            (k, options.get(k)) for k in ("keys", "heads", "layers")]:
        if value is not None:
            check_whole(size(value, name), name, high=MAX_SIZE)


def _pair_name(k: int, convention, pairs: Fraction, macs: Fraction, exact: Fraction,
               how: str) -> tuple[str, str, str]:
    """(convention, used by, against the exact causal count ``exact``) of row ``k``."""
    if convention is None:
        return ((f"exact, causal ({how})" if k else f"exact, no mask ({how})"), "exactattn",
                "exact for a causal head" if k else "exact for an unmasked head")
    diff = pairs - exact
    if diff == 0:
        versus = "same as the count"
    else:
        sign = "+" if diff > 0 else ""
        versus = (f"{sign}{fraction_text(diff)} pairs "
                  f"({sign}{fraction_text(diff * macs / pairs)} MACs, "
                  f"x{round_fraction(pairs / exact, 2)}) against the causal count")
    return convention.name, convention.used_by, versus


def conventions_sections(n=32, d_model=4, d_k=4, d_v=None, **options) -> list:
    """Conventions side by side for the same head at n tokens: pairs, MACs, FLOPs, operations.

    Two tables: ``cost/conventions`` (the query-key pairs and pair MACs each
    convention gives, against the exact causal count n(n+1)/2) and
    ``cost/operations`` (MACs, FLOPs = 2 x MACs, and the exact
    multiplications and additions, k - 1 per length-k sum).  Figures from
    :func:`~exactattn.cost.conventions.compare_conventions`: the exact rows
    are counted when the unmasked head's derived total is at most
    ``count_limit`` MACs, else derived and marked ``derived``.

    ``options``: its causal, heads, layers, count_limit.  Units: pairs, MACs, FLOPs.

    Raises:
        InputError: a size or ``count_limit`` that is not a positive whole
            number; a size over :data:`~exactattn.cost.sizes.MAX_SIZE`.

    Reference: Vaswani et al. 2017, sec. 3.2.1.

    >>> s = conventions_sections(32)
    >>> [r[2] for r in s[0].rows]
    ['1024', '528', '1024', '512', '528']
    >>> conventions_sections(32, count_limit=1000)[0].rows[1][:4]
    ['exact, causal (derived)', 'exactattn', '528', '4224']
    """
    _printable([n], "n", d_model, d_k, d_v, options)
    call, limit, counted, unmasked_total, counts, stages, ops = compare_conventions(
        n, d_model, d_k, d_v, **options)
    how = "counted" if counted else "derived"
    n, heads = call.queries, call.heads if call.out_projection else None
    rows, data = [], []
    for k, (convention, p, m) in enumerate(counts):
        name, used_by, versus = _pair_name(k, convention, p, m, counts[1][1], how)
        pairs, macs, flops = (fraction_text(x) for x in (p, m, 2 * m))
        rows.append([name, used_by, pairs, macs, flops, versus])
        data.append({"convention": name, "pairs": pairs, "pair_macs": macs, "pair_flops": flops})
    layers = "" if call.layers == 1 else f", L = {call.layers} layers"
    pairs_sec = Section(
        "cost/conventions", f"Attention pairs under each convention at n = {n}",
        ["convention", "used by", "pairs", "pair MACs", "pair FLOPs (2 x MACs)",
         "against the exact causal count"], rows,
        [f"D = d_model = {call.d_model}, d_k = {call.d_k}, d_v = {call.d_v}"
         f"{'' if heads is None else f', h = {heads} heads'}{layers}; "
         f"pair MACs = pairs x (d_k + d_v){'' if heads is None else ' x h'}"
         f"{'' if call.layers == 1 else ' x L'}",
         f"exact rows {how} ("
         + (f"the head was run: at most {limit} MACs, the count limit)" if counted else
            f"not run: {unmasked_total} MACs are over the count limit of {limit})"),
         f"n^2/2 undercounts the causal pairs by n/2 = {fraction_text(Fraction(n, 2))}; "
         f"the full rectangle overcounts them by n(n-1)/2 = {n * (n - 1) // 2}"],
        {"n": n, "conventions": data, "source": how})
    orows, odata = [], {}
    for stage, macs, mul, add in stages:
        cells = [macs, mul, add, 2 * macs, mul + add]
        orows.append([stage] + [str(x) for x in cells] + [str(2 * macs - mul - add)])
        if stage != "total":
            odata[stage] = dict(zip(("macs", "multiplications", "additions", "flops",
                                     "operations"), cells))
    ops_sec = Section(
        "cost/operations",
        f"MACs, FLOPs and exact operations at n = {n} "
        f"({'causal' if call.policy.causal else 'no mask'})",
        ["stage", f"MACs ({how})", "multiplications", "additions (k - 1 per sum)",
         "FLOPs = 2 x MACs", "exact operations", "FLOPs - exact"], orows,
        list(CONVENTION_NOTES) + [
            "multiplications and additions are derived from the loop nests; MACs are "
            + ("counted" if counted else
               f"derived too: the head was not run, its {unmasked_total} MACs are over the "
               f"count limit of {limit}"),
            ("softmax, counted separately: " + ", ".join(
                f"{ops[k]} {name}" for k, name in
                (("exp", "exponentials"), ("add", "additions"), ("div", "divisions"))))
            if counted else
            "softmax: not counted (they depend on the numbers, and the head was not run); "
            "raise the count limit to count them"],
        {"n": n, "source": how, "count_limit": limit, "stages": odata, "softmax_ops": ops})
    return [pairs_sec, ops_sec]
