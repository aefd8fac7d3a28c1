"""The exact gradients of every head of a :class:`~exactattn.call.Call`: one block per (batch,
key/value head), each a :class:`~exactattn.gradients.Gradients` of the call's rows.

:meth:`Reference.gradients <exactattn.verify.Reference.gradients>` builds them;
``verify --backward`` rounds them to a dtype (:meth:`ExactGradients.rounded`).
"""

from __future__ import annotations

import numpy as np

from ..call.inputs import object_array, reshaped
from ..numbers.formats import float_format, round_cells, round_value


class ExactGradients:
    """The exact gradients of every head of a call: one block per (batch, key/value head)."""

    def __init__(self, call, d_out: np.ndarray, d_lse: np.ndarray | None = None, *,
                 rows_of=None, rotate=None, bound=None):
        """``rows_of(b, h, i)``: the forward's softmax row, ``rotate`` the forward's rotation
        and ``bound`` its policy (a rope bound to the call), for a soft-capped or rotary call
        (:class:`~exactattn.gradients.Gradients`)."""
        from ..gradients import Gradients, block_inputs, check_policy
        problem, policy = call, call.policy
        check_policy(policy)
        sh = problem.shape
        self.shape = sh
        self.policy = policy
        d2 = policy.divisor_squared_for(sh["E"])
        L, S = sh["L"], sh["S"]
        self.heads = {g: policy.query_heads(g, sh["H_q"], sh["H_kv"]) for g in range(sh["H_kv"])}
        self.blocks = {}
        for b in range(sh["B"]):
            for g, hs in self.heads.items():
                queries, dO, keep, offsets, factors, lse = [], [], [], [], [], []
                for h in hs:       # problem head h is model head policy.head + h (ALiBi)
                    hp = policy.for_head(h)
                    drop = None if problem.dropout_keep is None else problem.dropout_keep[b, h]
                    block = block_inputs(hp, L, S, problem.block_mask(b, h), drop)
                    queries += problem.query[b, h].tolist()
                    dO += d_out[b, h].tolist()
                    lse += [0] * L if d_lse is None else d_lse[b, h].tolist()
                    keep.append(block["keep"])
                    offsets += block["offsets"] or [None] * L
                    factors += block["factors"] or [[1] * S] * L
                self.blocks[(b, g)] = Gradients(
                    queries, problem.key[b, g].tolist(), problem.value[b, g].tolist(), dO,
                    keep=np.concatenate(keep), offsets=offsets, divisor_squared=d2,
                    empty_row=policy.empty_row, sink=policy.sink,
                    factors=None if problem.dropout_keep is None else factors,
                    policy=bound or policy,
                    positions=[policy.query_position(i, L, S) for i in range(L)] * len(hs),
                    d_lse=None if d_lse is None else lse, rotate=rotate,
                    rows=None if rows_of is None else [rows_of(b, h, i) for h in hs
                                                       for i in range(L)])

    def locate(self, name: str, b: int, h: int, i: int, c: int):
        """(block, row, column) of one entry (h is the query head for dQ, else the kv head)."""
        if name in ("dQ", "dsink"):
            g = self.policy.kv_head(h, self.shape["H_q"], self.shape["H_kv"])
            return self.blocks[(b, g)], self.heads[g].index(h) * self.shape["L"] + i, c
        return self.blocks[(b, h)], i, c

    def value(self, name: str, b: int, h: int, i: int, c: int):
        """One entry; ``dsink`` (at i = c = 0) is query head h's: its rows' sum."""
        block, row, col = self.locate(name, b, h, i, c)
        if name == "dsink":
            return block.value(name, rows=range(row, row + self.shape["L"]))
        return block.value(name, row, col)

    def shape_of(self, name: str) -> tuple:
        sh = self.shape
        return {"dQ": (sh["B"], sh["H_q"], sh["L"], sh["E"]),
                "dK": (sh["B"], sh["H_kv"], sh["S"], sh["E"]),
                "dV": (sh["B"], sh["H_kv"], sh["S"], sh["E_v"]),
                "dsink": (sh["B"], sh["H_q"], 1, 1)}[name]

    def rounded(self, name: str, dtype, prec: int):
        """``(floats, balls, magnitudes)`` of one gradient, correctly rounded to ``dtype``.

        Whole blocks are enclosed at ``prec`` bits, then at twice that; what is left
        (exact zeros, ties, stragglers) is rounded entry by entry from its exact value
        (:func:`~exactattn.numbers.formats.round_cells`).
        """
        fmt = float_format(dtype)
        shape = self.shape_of(name)
        rounded = np.empty(shape)
        balls = np.empty(shape, dtype=object)
        mags = np.zeros(shape)
        for b, h in np.ndindex(*shape[:2]):
            block, start, _ = self.locate(name, b, h, 0, 0)
            if name == "dsink":           # one sum per query head: its rows at the sink
                mags[b, h] = block.magnitudes()["dS"][start:start + self.shape["L"], -1].sum()
                rounded[b, h], balls[b, h] = round_value(self.value(name, b, h, 0, 0), fmt,
                                                         prec)
                continue
            mags[b, h] = block.magnitudes()[name][start:start + shape[2]]
            todo = [(i, c) for i in range(shape[2]) for c in range(shape[3])]
            if fmt.name == "float32":
                todo = self._from_floats(block, name, start, shape, (b, h), rounded, balls)
            if not todo:
                continue

            def balls_at(p):
                mat = block.balls(p)[name]
                return lambda cell: None if block.atom_nan((name, start + cell[0], cell[1])) \
                    else mat[start + cell[0], cell[1]]
            round_cells(todo, balls_at, lambda cell: block.value(name, start + cell[0], cell[1]),
                        fmt, prec, (rounded[b, h], balls[b, h]), max_prec=2 * prec,
                        exact_prec=4 * prec)
        return rounded, balls, mags

    @staticmethod
    def _from_floats(block, name, start, shape, at, rounded, balls) -> list:
        """Round to float32 from the certified float64 enclosures
        (:mod:`exactattn.gradients.floats`): an entry whose two ends (pushed one float64
        outwards) round to one float32 is that float32 (rounding is monotonic); returns the
        entries left (ends that differ, zeros of uncertain sign, NaN rows)."""
        from flint import arb
        got = block.enclosures()
        cells = [(i, c) for i in range(shape[2]) for c in range(shape[3])]
        if got is None:
            return cells
        m, r = (a[start:start + shape[2]] for a in got[name])
        with np.errstate(all="ignore"):
            lo = np.nextafter(np.nextafter(m - r, -np.inf), -np.inf)
            hi = np.nextafter(np.nextafter(m + r, np.inf), np.inf)
            f_lo, f_hi = lo.astype(np.float32), hi.astype(np.float32)
        ok = (f_lo == f_hi) & np.isfinite(f_lo) & (np.signbit(f_lo) == np.signbit(f_hi))
        rows = np.array([block.atom_nan((name, start + i, 0)) for i in range(shape[2])])
        ok &= ~rows[:, None]
        left = []
        for i, c in cells:
            if ok[i, c]:
                rounded[at + (i, c)] = float(f_lo[i, c])
                balls[at + (i, c)] = arb(float(m[i, c]), float(r[i, c]))
            else:
                left.append((i, c))
        return left


def d_out_array(problem, d_out, name: str = "d_out") -> np.ndarray:
    """``d_out`` (the output's shape), or with ``name="d_lse"`` the rows' log-sum-exp gradients
    (B x H_q x L in the call's rank), as an object array of exact numbers."""
    from ..numbers.exact import to_exact
    sh = problem.shape
    lse = name == "d_lse"
    want = (sh["B"], sh["H_q"], sh["L"]) + (() if lse else (sh["E_v"],))
    arr = reshaped(np.array(d_out, dtype=object), want, problem.rank - lse, name, tail=not lse,
                   like=" like the log-sum-exp" if lse else " like the output")
    flat = [to_exact(v.item() if isinstance(v, np.generic) else v, name=name, floats="exact")
            for v in arr.reshape(-1)]
    return object_array(flat, want)


