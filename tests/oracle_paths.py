"""The package side of the differential test: every exactattn path that can take a case.

:class:`PackageRun` builds each path's objects once for a case (a dict of
:mod:`oracle_cases`); :meth:`PackageRun.results` gives certified decimals at some places and
:meth:`PackageRun.float_results` float roundings, in the oracle's index layout::

    results[path][quantity][index] = "0.326358"    # or "nan", "-inf"

Paths (each skipped, with the reason in ``run.skipped``, where the package documents that it
does not take the case):

``reference``
    ``Call(..., policy=Policy(...))`` -> ``verify.reference.Reference``: shares, weights,
    outputs, lse, sink_share (``.decimal``); floats from ``rounded_outputs``/``rounded_lse``.
``engine:pencil``, ``engine:fast``, ``engine:symbolic``, ``engine:auto``
    ``Head`` + ``attend`` on a self-attention case (B = H = Hkv = 1, L = S): token
    ``x_i = concat(q_i, k_i, v_i)`` and selector matrices (slots layout), so the head's
    projections are the case's queries, keys and values exactly; ``trace.share(i, j)``,
    ``weight``, ``output``, ``sink_share``, ``lse``.  ``.../bulk``: ``trace.share_decimals``,
    ``output_decimals``, ``dropped_decimals``.  ``attend`` takes no explicit mask, the fast
    engine no RoPE or dropout, the symbolic engine no modifier (head.py, modified.py).
``blocks``
    ``Call.head`` + ``blocks.certify(..., engine=Engine("none"))``, rows in blocks
    of 1 or 2: shares, outputs.  Row blocks take every modifier, not an additive mask
    (call/inputs.py, ``Call.head``).
``gradients``, ``gradients/bulk``
    ``exactattn.gradients.gradients(...)`` per (batch, query head): P (shares), O (outputs),
    dP, D, dS, dQ, d_sink, and dK, dV when every key/value head has one query head;
    ``/bulk`` is ``Gradients.decimals``.  Soft-capping and RoPE are refused (documented).
``head_gradients``
    ``exactattn.gradients.head_gradients(head, x, d_out, empty_row=..., dropout_keep=...)`` on
    the engines' head (self-attention, no mask): its ``.call`` read like ``gradients``.
``verify-backward``
    ``Reference(problem).gradients(d_out, d_lse)``: dQ, dK, dV (GQA blocks);
    floats from ``ExactGradients.rounded``.
``cli:scores``, ``cli:backward``, ``cli:square`` (only with ``cli=True``)
    ``python -m exactattn scores|backward|square --spec FILE --format json --digits N`` plus
    the modifier flags, for self-attention cases without a mask (a head spec has no mask).
    ``square``'s scores (rotated under RoPE) and logits (the last table that changes them)
    are compared with the oracle's ``scores`` and ``logits``.

A refusal is an :class:`exactattn.errors.ExactAttnError` (its message kept in
``run.refusals``); any other exception is a crash (``run.crashes``, with the traceback).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import traceback
from fractions import Fraction
from typing import Any, Callable

import numpy as np

from oracle_cases import dims

FORMATS = ("float16", "bfloat16", "float32", "float64")
ENGINES = ("pencil", "fast", "symbolic", "auto")
GRAD_NAMES = ("dP", "D", "dS", "dQ", "dK", "dV", "d_sink")


def _frac(s) -> Fraction:
    return Fraction(s)


def policy_of(case: dict):
    """The case's :class:`exactattn.call.policy.Policy` (the mask kind from the case's mask)."""
    from exactattn.call.policy import Policy
    from exactattn.call.modifiers import Alibi, Rope
    sc = case["scale"]
    scale = "default" if sc == "default" else None if sc == "none" else \
        _frac(sc["divisor_squared"])
    return Policy(
        divisor_squared=scale, causal=case["causal"], alignment=case["alignment"],
        empty_row=case["empty_row"], gqa=case["gqa"],
        mask_kind=case["mask"]["kind"] if case["mask"] else "bool_keep",
        window=None if case["window"] is None else tuple(case["window"]),
        query_offset=case["query_offset"],
        softcap=None if case["softcap"] is None else _frac(case["softcap"]),
        sink=None if case["sink"] is None else _frac(case["sink"]),
        alibi=None if case["alibi"] is None else Alibi(case["alibi"]["heads"],
                                                      case["alibi"]["form"]),
        rope=None if case["rope"] is None else Rope(_frac(case["rope"]["theta"]),
                                                    case["rope"]["layout"],
                                                    case["rope"].get("dims"),
                                                    case["rope"].get("scaling")),
        dropout=None if case["dropout"] is None else _frac(case["dropout"]["p"]),
        head=case["head"])


def _mask_rows(case: dict):
    m = case["mask"]
    if m is None:
        return None
    if m["kind"] == "additive":
        return [[[["-inf" if e is None else e for e in r] for r in hr] for hr in br]
                for br in m["rows"]]
    return m["rows"]


def problem_of(case: dict):
    """The case as a :class:`exactattn.call.Call` (4-dimensional arrays) under its policy."""
    from exactattn.call import Call
    return Call(
        case["query"], case["key"], case["value"], _mask_rows(case),
        policy=policy_of(case), name="oracle case",
        dropout_keep=None if case["dropout"] is None else case["dropout"]["keep"])


def is_self_attention(case: dict) -> bool:
    B, H, Hkv, L, S, E, Ev = dims(case)
    return B == H == Hkv == 1 and L == S


def head_and_tokens(case: dict):
    """A slots-layout head whose projections of ``x_i = concat(q_i, k_i, v_i)`` are exactly the
    case's q_i, k_i, v_i, and those tokens (self-attention cases only)."""
    B, H, Hkv, L, S, E, Ev = dims(case)
    d = 2 * E + Ev

    def selector(start, width):
        return [["1" if c == start + s else "0" for c in range(d)] for s in range(width)]
    q, k, v = case["query"][0][0], case["key"][0][0], case["value"][0][0]
    x = [list(q[i]) + list(k[i]) + list(v[i]) for i in range(L)]
    return selector(0, E), selector(E, E), selector(2 * E, Ev), x


def _divisor_text(case: dict) -> str | None:
    sc = case["scale"]
    if sc == "default":
        return None
    if sc == "none":
        return "none"
    return f"sqrt({sc['divisor_squared']})"


class PackageRun:
    """Every package path on one case; objects built once, decimals at any places."""

    def __init__(self, case: dict, *, cli: bool = False, engines: tuple = ENGINES,
                 block_rows: int | None = None):
        self.case = case
        self.cli = cli
        self.engines = engines
        self.block_rows = block_rows
        self.B, self.H, self.Hkv, self.L, self.S, self.E, self.Ev = dims(case)
        self.refusals: list[tuple[str, str]] = []       # (path, message)
        self.crashes: list[tuple[str, str]] = []        # (path, traceback)
        self.skipped: list[tuple[str, str]] = []        # (path, why: documented unsupported)
        #: equality checks: (path, what, expected, got) with got True/False or "raised: ..."
        self.equalities: list[tuple[str, str, bool, Any]] = []
        self._objects: dict[str, Any] = {}
        self._build()

    # -- running a path, refusals and crashes apart --------------------------------------
    def _guard(self, path: str, fn: Callable, *args, **kwargs):
        from exactattn.errors import ExactAttnError
        try:
            return True, fn(*args, **kwargs)
        except ExactAttnError as e:
            self.refusals.append((path, f"{type(e).__name__}: {e}"))
        except Exception:                              # noqa: BLE001 - a crash is a finding
            self.crashes.append((path, traceback.format_exc(limit=6)))
        return False, None

    def _build(self) -> None:
        case = self.case
        ok, self.policy = self._guard("policy", policy_of, case)
        if not ok:
            return
        ok, self.problem = self._guard("reference", problem_of, case)
        if ok:
            from exactattn.reference.reference import Reference
            ok, ref = self._guard("reference", Reference, self.problem)
            if ok:
                self._objects["reference"] = ref
        if is_self_attention(case):
            self._build_engines()
        else:
            for e in self.engines:
                self.skipped.append((f"engine:{e}", "not a self-attention case (B = H = Hkv = 1, "
                                                    "L = S): a head projects one token row"))
        self._build_blocks()
        self._build_gradients()

    def _build_engines(self) -> None:
        case, pol = self.case, self.policy
        if case["mask"] is not None:
            for e in self.engines:
                self.skipped.append((f"engine:{e}", "attend takes no explicit mask"))
            return
        from exactattn.engines.head import Head, attend
        W_Q, W_K, W_V, x = head_and_tokens(case)
        div = _divisor_text(case)
        kw = {} if div is None else {"divisor": div}
        ok, head = self._guard("engine", Head, W_Q, W_K, W_V, layout="slots", **kw)
        if not ok:
            return
        head = head.with_policy(pol if pol.divisor_squared == "default" else pol)
        keep = None if case["dropout"] is None else case["dropout"]["keep"][0][0]
        for engine in self.engines:
            path = f"engine:{engine}"
            if engine == "symbolic" and pol.modified:
                self.skipped.append((path, "the symbolic engine runs no modifier (modified.py)"))
                continue
            if engine == "fast" and pol.unsupported("fast"):
                self.skipped.append((path, "the fast engine runs no RoPE or dropout "
                                           "(Policy.unsupported('fast'))"))
                continue
            ok, trace = self._guard(path, attend, head, x, engine=engine, dropout_keep=keep)
            if ok:
                self._objects[path] = trace

    def _build_blocks(self) -> None:
        case, pol = self.case, self.policy
        if case["mask"] is not None and case["mask"]["kind"] == "additive":
            self.skipped.append(("blocks", "row blocks take boolean masks only"))
            return
        if "reference" not in self._objects:
            return
        pol = self.problem.with_policy(pol).policy
        inputs = {}
        for b in range(self.B):
            for h in range(self.H):
                ok, x = self._guard("blocks", self.problem.head, b, h)
                if not ok:
                    return
                inputs[(b, h)] = x
        self._objects["blocks"] = inputs

    def _build_gradients(self) -> None:
        case, pol = self.case, self.policy
        if case["d_out"] is None:
            return
        d_lse = case.get("d_lse")
        if "reference" not in self._objects:
            return
        from exactattn.gradients import gradients
        from exactattn.reference.reference import Reference
        pol = self.problem.with_policy(pol).policy
        blocks = {}
        for b in range(self.B):
            for h in range(self.H):
                g = pol.kv_head(h, self.H, self.Hkv)
                hp = pol if pol.alibi is None else pol.replace(head=pol.head + h)
                keep = None if case["dropout"] is None else case["dropout"]["keep"][b][h]
                ok, grad = self._guard(
                    "gradients", gradients, case["query"][b][h], case["key"][b][g],
                    case["value"][b][g], case["d_out"][b][h], hp, self.problem.block_mask(b, h),
                    dropout_keep=keep, d_lse=None if d_lse is None else d_lse[b][h])
                if not ok:
                    break
                blocks[(b, h)] = grad
        else:
            self._objects["gradients"] = blocks
        if is_self_attention(case) and case["mask"] is None and "engine:pencil" in self._objects \
                and d_lse is None:
            # the head's weight gradients (docs/gradients.md): their call block is the same
            # Gradients; empty_row passed explicitly (its default is "zero", not the policy's)
            from exactattn.gradients import head_gradients
            trace = self._objects["engine:pencil"]
            keep = None if case["dropout"] is None else case["dropout"]["keep"][0][0]
            ok, hg = self._guard("head_gradients", head_gradients, trace.head, trace.x,
                                 case["d_out"][0][0], empty_row=pol.empty_row,
                                 dropout_keep=keep)
            if ok:
                self._objects["head_gradients"] = {(0, 0): hg.call}
        ok, eg = self._guard("verify-backward", lambda *a: Reference(self.problem).gradients(*a),
                             case["d_out"], d_lse)
        if ok:
            self._objects["verify-backward"] = eg

    # -- decimals ----------------------------------------------------------------------
    def results(self, places: int) -> dict[str, dict[str, dict[tuple, str]]]:
        """``results[path][quantity][index]`` = certified decimal at ``places`` places."""
        out: dict = {}
        for path, obj in self._objects.items():
            fill = (self._reference if path == "reference" else
                    self._engine if path.startswith("engine:") else
                    self._blocks if path == "blocks" else
                    self._gradients if path in ("gradients", "head_gradients") else
                    self._verify_backward)
            fill(path, obj, places, out)
        if self.cli:
            self._cli(places, out)
        return out

    def _put(self, out, path, quantity, index, fn, *args):
        ok, value = self._guard(path, fn, *args)
        if ok:
            out.setdefault(path, {}).setdefault(quantity, {})[tuple(index)] = value
        return ok

    def _reference(self, path, ref, places, out) -> None:
        B, H, L, S, Ev = self.B, self.H, self.L, self.S, self.Ev
        for b in range(B):
            for h in range(H):
                for i in range(L):
                    for j in range(S):
                        if not self._put(out, path, "shares", (b, h, i, j),
                                         lambda: ref.share(b, h, i, j).decimal(places)):
                            return
                        if self.case["dropout"] is not None:
                            self._put(out, path, "weights", (b, h, i, j),
                                      lambda: ref.dropped_share(b, h, i, j).decimal(places))
                    for c in range(Ev):
                        self._put(out, path, "outputs", (b, h, i, c),
                                  lambda: ref.output(b, h, i, c).decimal(places))
                    self._put(out, path, "lse", (b, h, i),
                              lambda: ref.lse(b, h, i).decimal(places))
                    if self.case["sink"] is not None:
                        self._put(out, path, "sink_share", (b, h, i),
                                  lambda: ref.row(b, h, i).sink_share().decimal(places))

    def _engine(self, path, trace, places, out) -> None:
        L, Ev = self.L, self.Ev
        sym = trace.engine == "symbolic"
        for i in range(L):
            for j in range(L):
                if not self._put(out, path, "shares", (0, 0, i, j),
                                 lambda: trace.share(i, j).decimal(places)):
                    return
                if self.case["dropout"] is not None:
                    self._put(out, path, "weights", (0, 0, i, j),
                              lambda: trace.dropped_share(i, j).decimal(places))
            for c in range(Ev):
                self._put(out, path, "outputs", (0, 0, i, c),
                          lambda: trace.output(i, c).decimal(places))
            if not sym:
                self._put(out, path, "lse", (0, 0, i), lambda: trace.lse(i).decimal(places))
            if self.case["sink"] is not None:
                self._put(out, path, "sink_share", (0, 0, i),
                          lambda: trace.sink_share(i).decimal(places))
        bulk = path + "/bulk"
        ok, shares = self._guard(bulk, trace.share_decimals, places)
        if ok:
            out.setdefault(bulk, {})["shares"] = {
                (0, 0, i, j): shares[i][j] for i in range(L) for j in range(L)}
        ok, outputs = self._guard(bulk, trace.output_decimals, places)
        if ok:
            out.setdefault(bulk, {})["outputs"] = {
                (0, 0, i, c): outputs[i][c] for i in range(L) for c in range(Ev)}
        if self.case["dropout"] is not None:
            ok, w = self._guard(bulk, trace.dropped_decimals, places)
            if ok:
                out.setdefault(bulk, {})["weights"] = {
                    (0, 0, i, j): w[i][j] for i in range(L) for j in range(L)}

    def _blocks(self, path, inputs, places, out) -> None:
        from exactattn.blocks import Engine, certify
        rows = self.block_rows or (1 + (self.L + self.S) % 2)
        for (b, h), x in inputs.items():
            ok, blocks = self._guard(path, lambda: list(certify(
                x, places, shares=True, rows=rows, engine=Engine("none"))))
            if not ok:
                return
            for blk in blocks:
                k0 = blk.keys[0] if len(blk.shares[0]) != self.S else 0 if blk.shares else 0
                for r, i in enumerate(range(blk.r0, blk.r1)):
                    for jj, s in enumerate(blk.shares[r]):
                        out.setdefault(path, {}).setdefault("shares", {})[(b, h, i, k0 + jj)] = s
                    for c, s in enumerate(blk.outputs[r]):
                        out.setdefault(path, {}).setdefault("outputs", {})[(b, h, i, c)] = s

    def _gradients(self, path, blocks, places, out) -> None:
        S, L, E, Ev = self.S, self.L, self.E, self.Ev
        one_group = self.H == self.Hkv
        bulk = path + "/bulk"
        for (b, h), g in blocks.items():
            kv = self.policy.kv_head(h, self.H, self.Hkv)
            for i in range(L):
                for j in range(S):
                    for name, q in (("P", "shares"), ("dP", "dP"), ("dS", "dS")):
                        if not self._put(out, path, q, (b, h, i, j),
                                         lambda: g.value(name, i, j).decimal(places)):
                            return
                self._put(out, path, "D", (b, h, i), lambda: g.value("D", i).decimal(places))
                for c in range(Ev):
                    self._put(out, path, "outputs", (b, h, i, c),
                              lambda: g.value("O", i, c).decimal(places))
                for e in range(E):
                    self._put(out, path, "dQ", (b, h, i, e),
                              lambda: g.value("dQ", i, e).decimal(places))
                if self.case["sink"] is not None:
                    self._put(out, path, "sink_share", (b, h, i),
                              lambda: g.value("P", i, S).decimal(places))
            if self.case["sink"] is not None:
                self._put(out, path, "d_sink", (b, h), lambda: g.dsink.decimal(places))
                self._put(out, bulk, "d_sink", (b, h), lambda: g.decimals("dsink", places)[0])
            if one_group:
                for j in range(S):
                    for e in range(E):
                        self._put(out, path, "dK", (b, kv, j, e),
                                  lambda: g.value("dK", j, e).decimal(places))
                    for c in range(Ev):
                        self._put(out, path, "dV", (b, kv, j, c),
                                  lambda: g.value("dV", j, c).decimal(places))
            names = [("P", "shares"), ("dP", "dP"), ("dS", "dS"), ("D", "D"), ("dQ", "dQ"),
                     ("O", "outputs")] + ([("dK", "dK"), ("dV", "dV")] if one_group else [])
            for name, q in names:
                ok, grid = self._guard(bulk, g.decimals, name, places)
                if not ok:
                    continue
                d = out.setdefault(bulk, {}).setdefault(q, {})
                if name == "D":
                    for i in range(L):
                        d[(b, h, i)] = grid[i]
                    continue
                first = kv if name in ("dK", "dV") else h
                for r, row in enumerate(grid):
                    for c, s in enumerate(row[:S] if name in ("P", "dP", "dS") else row):
                        d[(b, first, r, c)] = s

    def _verify_backward(self, path, eg, places, out) -> None:
        for b in range(self.B * (self.case["sink"] is not None)):
            for h in range(self.H):
                self._put(out, path, "d_sink", (b, h),
                          lambda: eg.value("dsink", b, h, 0, 0).decimal(places))
        for name, heads, rows, cols in (("dQ", self.H, self.L, self.E),
                                        ("dK", self.Hkv, self.S, self.E),
                                        ("dV", self.Hkv, self.S, self.Ev)):
            for b in range(self.B):
                for h in range(heads):
                    for i in range(rows):
                        for c in range(cols):
                            if not self._put(out, path, name, (b, h, i, c),
                                             lambda: eg.value(name, b, h, i, c).decimal(places)):
                                return

    # -- floats ------------------------------------------------------------------------
    def float_results(self, formats=FORMATS) -> dict[str, dict[tuple, dict[tuple, Any]]]:
        """``floats[path][(quantity, fmt)][index]`` = the correctly rounded float (or "nan")."""
        out: dict = {}
        ref = self._objects.get("reference")
        if ref is not None:
            for fmt in formats:
                ok, got = self._guard("reference", ref.rounded_outputs, fmt)
                if ok:
                    out.setdefault("reference", {})[("outputs", fmt)] = _array_floats(got[0])
                ok, got = self._guard("reference", ref.rounded_lse, fmt)
                if ok:
                    out.setdefault("reference", {})[("lse", fmt)] = _array_floats(got[0])
        eg = self._objects.get("verify-backward")
        if eg is not None:
            for fmt in formats:
                for name in ("dQ", "dK", "dV"):
                    ok, got = self._guard("verify-backward", eg.rounded, name, fmt, 64)
                    if ok:
                        out.setdefault("verify-backward", {})[(name, fmt)] = _array_floats(got[0])
        return out

    # -- equalities --------------------------------------------------------------------
    def check_equalities(self) -> list[tuple[str, str, bool, Any]]:
        """Exact comparisons the package must get right, whatever the oracle's digits:

        * the ties the case was built with (``notes.ties``): the two shares are equal;
        * the same value built twice compares equal (a share, an output, an lse; two
          separately built references), and ``notes.equal_lse`` rows have equal lse.
        """
        out = self.equalities = []
        ref = self._objects.get("reference")
        notes = self.case.get("notes", {})

        def check(path, what, expected, fn):
            from exactattn.errors import ExactAttnError
            try:
                got = bool(fn())
            except ExactAttnError as e:
                got = f"refused: {type(e).__name__}: {e}"
            except Exception as e:                    # noqa: BLE001
                got = f"raised: {type(e).__name__}: {e}"
            out.append((path, what, expected, got))
        if ref is None:
            return out
        from exactattn.reference.reference import Reference
        twin = Reference(self.problem)
        for b, h, i, j1, j2 in notes.get("ties", []):
            check("reference", f"share[{b},{h},{i},{j1}] == share[{b},{h},{i},{j2}]", True,
                  lambda: ref.share(b, h, i, j1) == ref.share(b, h, i, j2))
            for path, trace in self._objects.items():
                if path.startswith("engine:") and trace.engine != "symbolic":
                    check(path, f"share[{i},{j1}] == share[{i},{j2}]", True,
                          lambda: trace.share(i, j1) == trace.share(i, j2))
        for b, h, i, b2, h2, i2 in notes.get("equal_lse", []):
            check("reference", f"lse[{b},{h},{i}] == lse[{b2},{h2},{i2}]", True,
                  lambda: ref.lse(b, h, i) == ref.lse(b2, h2, i2))
        # one row per case: the last query of head (0, 0), built twice
        i = self.L - 1
        nan_row = ref.row(0, 0, i).nan
        if not nan_row:
            check("reference", f"lse[0,0,{i}] == the same lse built again", True,
                  lambda: ref.lse(0, 0, i) == twin.lse(0, 0, i))
            check("reference", f"share[0,0,{i},0] == the same share built again", True,
                  lambda: ref.share(0, 0, i, 0) == twin.share(0, 0, i, 0))
            check("reference", f"output[0,0,{i},0] == the same output built again", True,
                  lambda: ref.output(0, 0, i, 0) == twin.output(0, 0, i, 0))
        return out

    # -- the command line --------------------------------------------------------------
    def cli_spec(self) -> tuple[dict, list[str]] | None:
        """The head spec file and modifier flags of a self-attention case without a mask."""
        case = self.case
        if not is_self_attention(case) or case["mask"] is not None:
            return None
        W_Q, W_K, W_V, x = head_and_tokens(case)
        spec = {"name": "oracle case", "layout": "slots",
                "tokens": [{"text": f"t{i}", "x": r} for i, r in enumerate(x)],
                "W_Q": W_Q, "W_K": W_K, "W_V": W_V, "causal": case["causal"],
                "policy": {"alignment": case["alignment"], "empty_row": case["empty_row"]}}
        div = _divisor_text(case)
        if div is not None:
            spec["divisor"] = div
        if case["dropout"] is not None:
            spec["policy"]["dropout"] = {"p": case["dropout"]["p"],
                                         "keep": case["dropout"]["keep"][0][0]}
        flags = []
        if case["sink"] is not None:
            flags += ["--sink", case["sink"]]
        if case["alibi"] is not None:
            flags += ["--alibi", f"{case['alibi']['heads']}:{case['alibi']['form']}",
                      "--head", str(case["head"])]
        if case["softcap"] is not None:
            flags += ["--softcap", case["softcap"]]
        if case["window"] is not None:
            flags += ["--window", ",".join("none" if w is None else str(w)
                                           for w in case["window"])]
        if case["query_offset"] is not None:
            flags += [f"--query-offset={case['query_offset']}"]
        if case["rope"] is not None:
            flags += ["--rope", f"{case['rope']['theta']}:{case['rope']['layout']}"]
            if case["rope"].get("scaling"):
                flags += ["--rope-scaling", json.dumps(case["rope"]["scaling"])]
        return spec, flags

    def _run_cli(self, path, args) -> dict | None:
        proc = subprocess.run([sys.executable, "-m", "exactattn", *args], capture_output=True,
                              text=True, timeout=120)
        if proc.returncode == 2 and proc.stderr.startswith("exactattn: error:"):
            self.refusals.append((path, proc.stderr.strip()))
            return None
        if proc.returncode != 0:
            self.crashes.append((path, f"exit {proc.returncode}: {proc.stderr[-3000:]}"))
            return None
        try:
            return json.loads(proc.stdout)
        except ValueError:
            self.crashes.append((path, f"not JSON: {proc.stdout[:500]}"))
            return None

    def _cli(self, places, out) -> None:
        got = self.cli_spec()
        if got is None:
            self.skipped.append(("cli", "a head spec is self-attention without a mask"))
            return
        spec, flags = got
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "case.json")
            with open(path, "w") as f:
                json.dump(spec, f)
            common = ["--spec", path, "--format", "json", "--digits", str(places)]
            doc = self._run_cli("cli:scores", ["scores", *common, *flags, "--lse"])
            if doc is not None:
                self._guard("cli:scores", _read_scores, doc, self.L, self.Ev,
                            out.setdefault("cli:scores", {}))
            doc = self._run_cli("cli:square", ["square", *common, *flags])
            if doc is not None:
                self._guard("cli:square", _read_square, doc, self.L, places,
                            out.setdefault("cli:square", {}))
            if self.case["d_out"] is not None and self.case["softcap"] is None \
                    and self.case["rope"] is None and self.case.get("d_lse") is None:
                d_out = ";".join(",".join(r) for r in self.case["d_out"][0][0])
                doc = self._run_cli("cli:backward", ["backward", *common, *flags,
                                                     f"--d-out={d_out}"])
                if doc is not None:
                    self._guard("cli:backward", _read_backward, doc, self.case,
                                out.setdefault("cli:backward", {}))


def _array_floats(a: np.ndarray) -> dict[tuple, Any]:
    return {idx: ("nan" if np.isnan(v) else float(v)) for idx, v in np.ndenumerate(a)}


def _tables(doc: dict) -> dict:
    return {t["name"]: t for t in doc["tables"]}


def _read_scores(doc: dict, n: int, Ev: int, out: dict) -> None:
    t = _tables(doc)
    data = t["scores/shares"]["data"]
    out["shares"] = {(0, 0, i, j): data["shares_decimal"][i][j]
                     for i in range(n) for j in range(n)}
    if data.get("sink_shares"):
        out["sink_share"] = {(0, 0, i): data["sink_shares"][i]["decimal"] for i in range(n)}
    o = t["scores/outputs"]["data"]["outputs_decimal"]
    out["outputs"] = {(0, 0, i, c): o[i][c] for i in range(n) for c in range(Ev)}
    if "scores/lse" in t:
        out["lse"] = {(0, 0, i): t["scores/lse"]["data"]["lse"][i]["decimal"] for i in range(n)}


def _read_square(doc: dict, n: int, places: int, out: dict) -> None:
    """``square``'s scores (rotated under RoPE) and the logits the softmax reads (the scaled
    scores when nothing else changes them; the raw ones without a divisor).  An exact value is
    printed in full (``25/16 = 1.5625``, ``0``): padded with zeros to ``places``."""
    t = _tables(doc)
    scores = t.get("square/rope") or t["square/raw"]
    logits = t.get("square/logits") or t.get("square/capped") or t.get("square/scaled") \
        or scores

    def padded(text):          # an exact value printed in full, read at ``places``
        if text in ("-inf", "inf", "nan"):
            return text
        q = Fraction(text) * 10 ** places
        k = round(q)             # ties to even, as the package rounds
        sign = "-" if k < 0 else ""
        digits = str(abs(k)).rjust(places + 1, "0")
        return sign + (digits[:-places] + "." + digits[-places:] if places else digits)
    for quantity, table in (("scores", scores), ("logits", logits)):
        rows = table["rows"]
        out[quantity] = {(0, 0, i, j): padded(_cell(rows[i][1 + j]))
                         for i in range(n) for j in range(n)}


def _cell(text: str) -> str:
    """A table cell's decimal: ``1/2 = 0.500000`` and ``x ~ 0.5`` give the part after the sign."""
    for sep in (" = ", " ~ "):
        if sep in text:
            return text.rsplit(sep, 1)[1]
    return text


def _read_backward(doc: dict, case: dict, out: dict) -> None:
    t = _tables(doc)
    B, H, Hkv, L, S, E, Ev = dims(case)

    def grid(name, quantity, width, key=lambda i, j: (0, 0, i, j)):
        rows = t[name]["rows"]
        out[quantity] = {key(i, j): _cell(rows[i][1 + j]) for i in range(len(rows))
                         for j in range(width)}
    grid("backward/shares", "shares", S)
    grid("backward/dP", "dP", S)
    grid("backward/dS", "dS", S)
    out["D"] = {(0, 0, i): _cell(t["backward/D"]["rows"][i][1]) for i in range(L)}
    grid("backward/dQ", "dQ", E)
    grid("backward/dK", "dK", E)
    grid("backward/dV", "dV", Ev)
    if case["sink"] is not None:
        out["sink_share"] = {(0, 0, i): _cell(t["backward/shares"]["rows"][i][1 + S])
                             for i in range(L)}
        note = [n for n in t["backward/dS"]["notes"] if "dL/dsink = " in n]
        if note:
            out["d_sink"] = {(0, 0): note[0].rsplit(" = ", 1)[1].split()[0].rstrip(";,")}


def package_results(case: dict, places: int, *, cli: bool = False) -> dict:
    """``results[path][quantity][index]`` = certified decimals of every path that takes the case.

    Refusals and crashes are on :class:`PackageRun` (use it directly to see them).
    """
    return PackageRun(case, cli=cli).results(places)


# --------------------------------------------------------------------------- the comparison
#: Refusals the package documents for calls the harness still makes, as (path prefix, a
#: substring of the message).  Every other refusal of a valid case is a finding.  (The
#: documented unsupported combinations -- gradients with softcap or RoPE, the fast engine
#: with RoPE or dropout, the symbolic engine with modifiers, attend with a mask, row blocks
#: with modifiers or additive masks -- are not even called: see PackageRun, run.skipped.)
ALLOWED_REFUSALS: list[tuple[str, str]] = [
    # The table commands refuse a query offset that nothing reads (no causal rule, window,
    # ALiBi or RoPE): a deliberate one-line refusal in exactattn/commands/modifier_flags.py.
    # (Not stated in README.md or docs/modifiers.md; Policy and verify take such an offset.)
    ("cli:", "--query-offset must come with a causal head"),
    # The table commands take a query offset >= 0 only (commands/modifier_flags.py); Policy,
    # verify and the oracle take any whole number (a negative one puts queries before key 0).
    ("cli:", "--query-offset must be a non-negative whole number"),
]


def _norm(s):
    """A decimal as compared: ``-0.000`` and ``0.000`` are the same rounding (the sign of a
    value that rounds to zero is a convention)."""
    if isinstance(s, str) and s.startswith("-") and s.strip("-0.") == "":
        return s[1:]
    return s


class Report:
    """One case compared on every path: counts, mismatches, crashes, refusals, equalities."""

    def __init__(self, case):
        self.case = case
        self.checked = 0
        self.undecided = 0             # the oracle said None (too close to a boundary)
        self.conventions = 0           # differences a documented convention explains
        self.mismatches: list[tuple] = []   # (path, quantity, index, places|fmt, package, oracle)
        self.crashes: list[tuple[str, str]] = []
        self.refusals: list[tuple[str, str]] = []
        self.allowed_refusals: list[tuple[str, str]] = []
        self.equalities: list[tuple] = []   # failed ones: (path, what, expected, got)
        self.skipped: list[tuple[str, str]] = []
        self.oracle_errors: list[str] = []

    @property
    def failed(self) -> bool:
        return bool(self.mismatches or self.crashes or self.refusals or self.equalities
                    or self.oracle_errors)

    def groups(self) -> dict[tuple[str, str, str], int]:
        """``(kind, path, quantity) -> count`` of everything that failed."""
        out: dict = {}

        def add(key):
            out[key] = out.get(key, 0) + 1
        for m in self.mismatches:
            add(("mismatch", m[0], m[1]))
        for p, _ in self.crashes:
            add(("crash", p, ""))
        for p, msg in self.refusals:
            add(("refusal", p, msg.split(":")[0]))
        for e in self.equalities:
            add(("equality", e[0], e[1].split("[")[0]))
        for _ in self.oracle_errors:
            add(("oracle error", "oracle", ""))
        return out

    def message(self, limit: int = 8) -> str:
        from oracle_cases import case_json
        lines = [f"case: {case_json(self.case)}"]
        for m in self.mismatches[:limit]:
            lines.append(f"mismatch {m[0]} {m[1]}{list(m[2])} at {m[3]}: package {m[4]!r}, "
                         f"oracle {m[5]!r}")
        if len(self.mismatches) > limit:
            lines.append(f"... {len(self.mismatches) - limit} more mismatches")
        for p, tb in self.crashes[:3]:
            lines.append(f"crash {p}: {tb.strip().splitlines()[-1]}\n{tb}")
        for p, msg in self.refusals[:3]:
            lines.append(f"refusal {p}: {msg[:400]}")
        for e in self.equalities[:4]:
            lines.append(f"equality {e[0]}: {e[1]} should be {e[2]}, got {str(e[3])[:300]}")
        for e in self.oracle_errors[:2]:
            lines.append(f"oracle error: {e}")
        return "\n".join(lines)


def _convention(case: dict, quantity: str, got, want) -> str | None:
    """The name of a documented convention under which ``got`` (package) and ``want``
    (oracle) are the same answer, else None.

    * ``lse-nan-row``: an empty row under ``empty_row="nan"``: the oracle says -inf (the log of
      an empty sum), the package NaN, as documented (``Reference.rounded_lse``: "-inf for a row
      that sees no key (and has no sink), NaN for a NaN row").
    """
    if quantity == "lse" and case["empty_row"] == "nan" and str(want) == "-inf" \
            and str(got) == "nan":
        return "lse-nan-row"
    return None


def _floats_equal(a, b) -> bool:
    if a == "nan" or b == "nan":
        return a == b
    return float(a) == float(b)


class CaseTimeout(BaseException):
    """A case ran past its time limit (a BaseException, so that no path's guard swallows it)."""


def compare(case: dict, places=(6, 12), *, cli: bool = False, floats: bool = True,
            oracle_class=None, timeout: float | None = 120) -> Report:
    """Run every path on ``case`` and compare every value with the oracle's.

    A case still running after ``timeout`` seconds (oracle and package together; only in
    the main thread, by SIGALRM) is stopped and reported as a crash of path ``timeout``.
    """
    import signal
    import threading
    rep = Report(case)
    armed = timeout and threading.current_thread() is threading.main_thread() and \
        hasattr(signal, "setitimer")
    if armed:
        def alarm(signum, frame):
            raise CaseTimeout
        old = signal.signal(signal.SIGALRM, alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        _compare(rep, case, places, cli, floats, oracle_class)
    except CaseTimeout:
        rep.crashes.append(("timeout", f"the case ran past {timeout} s"))
    finally:
        if armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    return rep


def _compare(rep: Report, case: dict, places, cli: bool, floats: bool, oracle_class) -> None:
    from oracle_cases import oracle_case
    if oracle_class is None:
        from oracle import Oracle as oracle_class
    try:
        o = oracle_class(oracle_case(case))
        names = set(o.names())
    except Exception:                                  # noqa: BLE001
        rep.oracle_errors.append(traceback.format_exc(limit=4))
        return
    run = rep.run = PackageRun(case, cli=cli)
    memo: dict = {}

    def oracle(kind, q, idx, arg):
        key = (kind, q, idx, arg)
        if key not in memo:
            try:
                memo[key] = o.decimal(q, idx, arg) if kind == "d" else o.float(q, idx, arg)
            except Exception:                          # noqa: BLE001
                rep.oracle_errors.append(f"{q}{list(idx)} {arg}: "
                                         f"{traceback.format_exc(limit=3)}")
                memo[key] = None
        return memo[key]
    for p in places:
        for path, quantities in run.results(p).items():
            for q, values in quantities.items():
                if q not in names:
                    continue
                for idx, got in values.items():
                    want = oracle("d", q, idx, p)
                    if want is None:
                        rep.undecided += 1
                        continue
                    rep.checked += 1
                    if _norm(got) != _norm(want):
                        if _convention(case, q, got, want):
                            rep.conventions += 1
                            continue
                        rep.mismatches.append((path, q, idx, p, got, want))
    if floats:
        for path, quantities in run.float_results().items():
            for (q, fmt), values in quantities.items():
                if q not in names:
                    continue
                for idx, got in values.items():
                    want = oracle("f", q, idx, fmt)
                    if want is None:
                        rep.undecided += 1
                        continue
                    rep.checked += 1
                    if not _floats_equal(got, want):
                        if _convention(case, q, got, want):
                            rep.conventions += 1
                            continue
                        rep.mismatches.append((path, q, idx, fmt, got, want))
    for e in run.check_equalities():
        rep.checked += 1
        if e[3] is not e[2]:
            rep.equalities.append(e)
    rep.crashes = list(run.crashes)
    for path, msg in run.refusals:
        allowed = any(path.startswith(p) and s in msg for p, s in ALLOWED_REFUSALS)
        (rep.allowed_refusals if allowed else rep.refusals).append((path, msg))
    rep.skipped = list(run.skipped)
