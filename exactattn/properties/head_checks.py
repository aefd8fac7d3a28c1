"""Checks of exactattn itself: the head engine, its cost counts and the online softmax.

These take a head and its tokens (or a row of scores) rather than a
function, and hold exactly: every comparison is between exact values.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Sequence

from ..call.inputs import Call
from ..call.policy import divisor_text
from ..engines.head import Head, attend
from ..errors import InputError, ShapeError
from ..reference.online import all_splits, online_softmax
from .checks import read_bias
from .inputs import PropertyFailure, failure, head_fail, matrices, selector_head, sizes, visible


def check_identical_tokens(head, x) -> int:
    """Two tokens with the same numbers get the same row of shares and the same output (no positions).

    Returns:
        the number of pairs of identical tokens compared.

    Raises:
        InputError: a causal head (its rows differ by position on purpose).
        PropertyFailure: identical tokens with different rows.

    >>> from exactattn.examples import chronicle
    >>> check_identical_tokens(chronicle().head, chronicle().x)    # tokens 2 and 4
    1
    """
    if head.causal:
        raise InputError("head must not be causal for this check (got causal=True)")
    trace = attend(head, x, engine="pencil")
    n = trace.n
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n) if trace.x[a] == trace.x[b]]
    bad = []
    for a, b in pairs:
        for j in range(n):
            if trace.share(a, j) != trace.share(b, j):
                bad.append(f"tokens {a} and {b} are identical but shares[{a}][{j}] != "
                           f"shares[{b}][{j}]")
        for c in range(head.d_v):
            if trace.output(a, c) != trace.output(b, c):
                bad.append(f"tokens {a} and {b} are identical but outputs[{a}][{c}] != "
                           f"outputs[{b}][{c}]")
    if bad:
        head_fail("two tokens with the same numbers get the same row", head, x, bad)
    return len(pairs)


def _biased_head(head, query_bias, key_bias, value_bias) -> Head:
    """The head with biases, as a head over ``x ++ [1]`` whose extra weight column is the bias."""
    def widen(W, b):
        return [list(r) + [e] for r, e in zip(W, b)]
    return Head(widen(head.W_Q, query_bias), widen(head.W_K, key_bias),
                widen(head.W_V, value_bias), layout="slots", causal=head.causal,
                divisor=divisor_text(head.divisor_squared))


def check_bias_cancels(head, x, *, key_bias: Sequence | None = None,
                       value_bias: Sequence | None = None) -> None:
    """A key bias cancels out of the shares; a value bias shifts every output by exactly itself.

    Derivation: with ``k_j = W_K x_j + b_k`` the score ``q_i . k_j`` gains
    ``q_i . b_k``, the same for every key j of row i, and a softmax ignores a
    constant added to a row.  With ``v_j = W_V x_j + b_v`` each output gains
    ``sum_j shares[i][j] b_v = b_v``.  A *query* bias adds ``b_q . k_j``,
    which depends on j, so it does not cancel (see the tests for a head
    where it moves the shares).  The biased head is built exactly, as a head
    over ``x ++ [1]`` whose extra weight column is the bias.

    Raises:
        PropertyFailure: shares that moved, or outputs not shifted by ``value_bias``.
    """
    b_k = read_bias(key_bias, head.d_k, "key_bias")
    b_v = read_bias(value_bias, head.d_v, "value_bias")
    plain = attend(head, x, engine="pencil")
    biased_head = _biased_head(head, [Fraction(0)] * head.d_k, b_k, b_v)
    biased = attend(biased_head, [list(r) + [Fraction(1)] for r in plain.x], engine="pencil")
    bad = []
    for i in range(plain.n):
        for j in range(plain.n):
            if plain.share(i, j) != biased.share(i, j):
                bad.append(f"shares[{i}][{j}] changed under key bias {[str(e) for e in b_k]}")
        if not plain.row(i).empty:
            for c in range(head.d_v):
                if biased.output(i, c) != plain.output(i, c) + b_v[c]:
                    bad.append(f"outputs[{i}][{c}] did not shift by value bias {b_v[c]}")
    if bad:
        head_fail("a key bias cancels and a value bias shifts the outputs by itself", head, x,
                  bad)


def check_cost(head, x) -> dict[str, int]:
    """The multiply-adds counted inside the engine's loops equal the formula derived from the loop bounds.

    Runs ``attend(head, x, engine="pencil")`` and compares ``trace.macs`` stage
    by stage with :func:`exactattn.cost.derive` (sympy sums over the loop
    nests: ``n D (2 d_k + d_v)``, ``n^2 d_k``, ``n^2 d_v``; a causal head sees
    n(n+1)/2 pairs) at n, D = d_model, d_k, d_v.  Units: MACs.

    Returns:
        the counted MACs per stage, with their ``total``.

    Raises:
        PropertyFailure: a stage whose count differs from the derived figure.

    >>> from exactattn.examples import chronicle
    >>> check_cost(chronicle().head, chronicle().x)
    {'projections': 192, 'scores': 64, 'mix': 64, 'total': 320}
    """
    from ..cost import SYMBOLS, derive
    trace = attend(head, x, engine="pencil")
    n, D, d_k, d_v = SYMBOLS
    at = {n: trace.n, D: head.d_model, d_k: head.d_k, d_v: head.d_v}
    formulas = derive(causal=head.causal)
    derived = {stage: int(expr.xreplace(at)) for stage, expr in formulas.items()}
    counted = dict(trace.macs)
    counted["total"] = sum(trace.macs.values())
    bad = [f"{stage}: counted {counted.get(stage)} MACs, derived {derived[stage]} "
           f"({formulas[stage]})" for stage in derived if counted.get(stage) != derived[stage]]
    if bad:
        head_fail("the counted cost equals the derived formula", head, x, bad)
    return counted


def check_masked_entries_absent(inp: Call) -> int:
    """No key or value at a masked position appears in any output, proved with sympy symbols.

    Every key and value entry is replaced by a symbol (``k_j_c``, ``v_j_c``)
    and :func:`exactattn.attend` runs with ``engine="symbolic"``; output i's
    free symbols must avoid those of the keys query i cannot see.  Uses the
    queries and policy of ``inp``: self-attention (as many keys as queries)
    without an explicit mask, causal or not (what ``attend`` supports).

    Returns:
        how many (query, hidden key) pairs were checked.

    Raises:
        PropertyFailure: a hidden key's or value's symbol in an output.
        InputError, ShapeError: a mask or shape ``attend`` does not support.

    >>> from exactattn.call.policy import Policy
    >>> from exactattn.properties import AttentionInput
    >>> check_masked_entries_absent(AttentionInput([[1], [2]], [[0], [0]], [[0], [0]],
    ...                                            policy=Policy(causal=True)))
    1
    """
    import sympy
    n_q, n_k, d_k, d_v = sizes(inp)
    if n_q != n_k:
        raise ShapeError(f"keys must number as many as queries for exactattn.attend, "
                         f"{n_q} (got {n_k})")
    if inp.mask is not None:
        raise InputError(f"mask must be None for exactattn.attend, which knows the causal rule "
                         f"only (got {inp.block_mask(0, 0)!r})")
    k_sym = [[sympy.Symbol(f"k_{j}_{c}") for c in range(d_k)] for j in range(n_k)]
    v_sym = [[sympy.Symbol(f"v_{j}_{c}") for c in range(d_v)] for j in range(n_k)]
    head, x = selector_head(matrices(inp)[0], k_sym, v_sym, causal=inp.policy.causal,
                            scale=inp.policy.divisor_squared, symbolic=True)
    trace = attend(head, x, engine="symbolic")
    bad, checked = [], 0
    for i, seen in enumerate(visible(inp)):
        hidden = [j for j in range(n_k) if j not in seen]
        symbols = {s for j in hidden for s in k_sym[j] + v_sym[j]}
        checked += len(hidden)
        for c in range(d_v):
            leak = sympy.sympify(trace.outputs[i][c]).free_symbols & symbols
            if leak:
                bad.append(f"outputs[{i}][{c}] contains {sorted(map(str, leak))}, entries of "
                           f"keys or values query {i} cannot see")
    if bad:
        raise failure("keys and values at masked positions appear in no output",
                      "exactattn.attend (symbolic)", inp, bad)
    return checked


def check_online_softmax(raw: Sequence, divisor_squared, values=None, *, blocks=None,
                         empty_row: str = "zero") -> int:
    """The online (blockwise, running-maximum) softmax equals the one-pass softmax exactly.

    ``blocks`` is one split (a block size or a list of lengths); None tries
    every split of the row (2**(n-1) of them).  See :mod:`exactattn.reference.online`.

    Returns:
        the number of splits compared.

    Raises:
        PropertyFailure: a split whose maximum, normaliser or outputs differ.

    >>> check_online_softmax([Fraction(0), None, Fraction(3)], Fraction(2))
    4
    """
    splits = list(all_splits(len(raw))) if blocks is None else [blocks]
    for split in splits:
        res = online_softmax(raw, divisor_squared, values, blocks=split, empty_row=empty_row)
        if not res.equals_one_pass():
            ref, outs = res.one_pass()
            raise PropertyFailure("\n".join([
                "property failed: the online softmax equals the one-pass softmax exactly",
                f"  raw scores: {['-inf' if r is None else str(r) for r in raw]}, "
                f"divisor squared {divisor_squared}",
                f"  blocks: {res.blocks}",
                f"  online: max {res.row.max_raw}, normaliser {res.row.counts}, "
                f"outputs {[o.numerators for o in res.outputs]}",
                f"  one pass: max {ref.max_raw}, normaliser {ref.counts}, "
                f"outputs {[o.numerators for o in outs]}"]))
    return len(splits)
