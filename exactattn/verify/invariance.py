"""Is a kernel batch-invariant: the same rows rerun inside other batches, paddings and KV splits.

:func:`check_invariance` runs the kernel once on the call as given, then on the
same rows

* ``batch``: each batch entry alone (when there are several), and among other
  rows (filler batch entries before and after them: batch sizes B + 3 and B + 15);
* ``pad``: with padded keys (5 more keys, hidden by the mask) and with padded
  queries (5 more query rows), for a kernel that takes a mask;
* ``split``: with ``num_splits`` 1, 2 and 4, for a kernel whose signature takes
  ``num_splits`` (FlashAttention's split-KV decoding),

and reads back the call's rows of every run.  Each run is compared bitwise with
the first, in ULPs of the dtype (:func:`~exactattn.numbers.formats.ulps_between`),
and with the exact answer (:func:`~exactattn.verify.check.verify_outputs`, the
tolerance of ``exactattn verify``).  The filler entries are multiples of 1/8
of a power of two from ``seed``, exact in every dtype, of both signs and up to 2
to 4 times the call's largest entry (a kernel that reads a tensor-wide maximum
moves).  A kind a kernel cannot be asked about (no mask, no ``num_splits``;
padding under ``bottom_right`` alignment, where the queries' positions move with
the lengths) is reported as such.

>>> from exactattn.call import Call
>>> rep = check_invariance("numpy", Call.random(4, 3, seed=1), kinds=("batch",))
>>> rep.verdict()
'invariance: bitwise identical'
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
from dataclasses import dataclass

import numpy as np

from ..errors import InputError, shorten
from ..numbers.formats import ulps_between
from .adapter import FunctionImpl, ask, make_call
from .check import check_request, verify_outputs
from .impls import four_d, load_impl

KINDS = ("batch", "split", "pad")


@dataclass
class Run:
    """One run of the call's rows: ``label``, the outputs (the call's shape; None when not
    run, ``why`` says why), ``ulps`` from the first run, the :class:`Report` against the exact
    answer."""

    label: str
    got: np.ndarray | None = None
    why: str = ""
    ulps: int | None = None
    report: object = None
    #: bitwise the first run's outputs
    same: bool = False


@dataclass
class InvarianceReport:
    """The runs of :func:`check_invariance`, the first (the call as given) first."""

    impl: str
    dtype: str
    runs: list

    @property
    def done(self) -> list:
        return [r for r in self.runs if r.got is not None]

    @property
    def identical(self) -> bool:
        """True when every run's outputs are bitwise those of the first."""
        return all(r.same for r in self.done)

    @property
    def within(self) -> bool:
        """True when every run is within the tolerance of the exact answer."""
        return all(r.report.passed for r in self.done)

    @property
    def passed(self) -> bool:
        return self.identical and self.within

    def spread(self) -> int | None:
        """The largest ULP difference between any two runs, entry by entry (None: NaN beside
        a number)."""
        got = np.stack([r.got for r in self.done]).reshape(len(self.done), -1)
        nan = np.isnan(got)
        if (nan.any(0) != nan.all(0)).any():
            return None
        return max((ulps_between(float(c.min()), float(c.max()), self.dtype)
                    for c in got[:, ~nan[0]].T), default=0)

    def verdict(self) -> str:
        """``invariance: bitwise identical`` (`` (past the tolerance)`` added when past it), or
        ``... differs by up to N ULPs (within|past the tolerance)``."""
        past = "" if self.within else " (past the tolerance)"
        if self.identical:
            return "invariance: bitwise identical" + past
        n = self.spread()
        size = "NaN beside a number" if n is None else f"up to {n} ULP{'s' * (n != 1)}"
        return f"invariance: differs by {size}{past or ' (within the tolerance)'}"


def check_invariance(impl, call, dtype: str = "float32", kinds=KINDS, *, seed: int = 0,
                     max_ulps: int | None = None, accumulation: str = "float32",
                     arrays: str = "numpy") -> InvarianceReport:
    """Rerun ``impl`` on the rows of ``call`` inside other batches, paddings and splits.

    Args:
        impl: as :func:`~exactattn.verify.check.verify` takes it (a name, a callable, an
            :class:`~exactattn.verify.adapter.Impl`).
        kinds: some of ``batch``, ``split``, ``pad`` (see the module).

    Raises:
        InputError: an unknown kind, a dropout call (its keep-mask is per row position), and
            whatever :func:`~exactattn.verify.check.verify` refuses.
    """
    impl = load_impl(impl, arrays=arrays)
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise InputError(f"invariance must be a comma list of {', '.join(KINDS)} (got "
                         f"{shorten(bad[0] if bad else 'none', quote=True)})")
    if call.policy.dropout is not None:
        raise InputError("invariance must come without dropout (got a keep-mask); its "
                         "keep-mask is drawn per position, so padding moves it")
    check_request(impl, call, dtype, max_ulps)
    rounded, _ = call.rounded(dtype)
    fc = make_call(rounded, dtype)
    q, k, v = four_d(fc.query, fc.key, fc.value)
    (B, H, L, _), S = q.shape, k.shape[2]
    m = None if fc.attn_mask is None else np.broadcast_to(*four_d(fc.attn_mask), (B, H, L, S)).copy()
    rng = np.random.default_rng(seed)
    top = 2.0 ** (math.frexp(max(1.0, *(np.abs(a).max(initial=0) for a in (q, k, v))))[1] + 1)

    def _filler(rng, shape):      # both signs, up to 2 to 4 times the call's largest entry
        return rng.integers(-8, 9, size=shape) / 8 * top
    open_, shut = (True, False) if m is None or m.dtype == bool else (0.0, -math.inf)

    def run(label, q, k, v, m, rows=slice(None), queries=slice(None), kernel=impl):
        """The kernel on these arrays; the call's rows of its outputs, B x H x L x E_v."""
        out, how, why, _ = ask(kernel.answer, dataclasses.replace(fc, query=q, key=k, value=v,
                                                                  attn_mask=m), asking=True)
        if out is None:
            return Run(label, why=why if how == "cannot be asked" else f"raised {why}")
        return Run(label, out.values.reshape(q.shape[:3] + (-1,))[rows, :, queries])

    def among(more, n):           # filler batch entries: ``more`` before the rows, the rest after
        def fill(a):
            return np.concatenate([_filler(rng, (more,) + a.shape[1:]), a,
                                   _filler(rng, (n - more - B,) + a.shape[1:])])
        mm = None if m is None else np.concatenate(
            [np.broadcast_to(m[:1], (more,) + m.shape[1:]), m,
             np.broadcast_to(m[:1], (n - more - B,) + m.shape[1:])])
        return fill(q), fill(k), fill(v), mm

    runs = [run("as given", q, k, v, m)]
    if runs[0].got is None:
        raise InputError(f"{impl.name} must answer the call as given to be rerun (got "
                         f"{runs[0].why})")
    if "batch" in kinds:
        if B > 1:
            alone = [run("", q[b:b + 1], k[b:b + 1], v[b:b + 1], None if m is None else m[b:b + 1])
                     for b in range(B)]
            bad = next((r.why for r in alone if r.got is None), "")
            runs.append(Run(f"each of the {B} batch entries alone", None if bad else
                            np.concatenate([r.got for r in alone]), bad))
        for more, n in ((1, B + 3), (5, B + 15)):
            runs.append(run(f"among other rows (batch {n}, from {more})", *among(more, n),
                            rows=slice(more, more + B)))
    if "split" in kinds:
        if isinstance(impl, FunctionImpl) and "num_splits" in impl.accepts:
            for n in (1, 2, 4):
                kernel = copy.copy(impl)
                kernel.fn = functools.partial(impl.fn, num_splits=n)
                runs.append(run(f"num_splits={n}", q, k, v, m, kernel=kernel))
        else:
            runs.append(Run("num_splits 1, 2, 4", why=f"{impl.name} takes no num_splits="))
    if "pad" in kinds:
        pol = fc.policy
        moved = pol.alignment == "bottom_right" and pol.query_offset is None and (
            pol.positional or (pol.alibi, pol.rope) != (None, None))
        why = "bottom_right moves the queries with the lengths" if moved else \
            "" if impl.takes_mask else f"{impl.name} takes no mask"
        mk = np.full((B, H, L, S), open_) if m is None else m
        keys = [np.concatenate([a, _filler(rng, a.shape[:2] + (5, a.shape[3]))], 2)
                for a in (k, v)]
        cases = (("keys padded by 5 (masked)", q, *keys,
                  np.concatenate([mk, np.full((B, H, L, 5), shut)], 3), slice(None)),
                 ("queries padded by 5", np.concatenate([q, _filler(rng, (B, H, 5, q.shape[3]))], 2),
                  k, v, None if m is None else np.concatenate([m, np.full((B, H, 5, S), open_)], 2),
                  slice(0, L)))
        for label, qq, kk, vv, mm, at in cases:
            runs.append(Run(label, why=why) if why else run(label, qq, kk, vv, mm, queries=at))
    for r in runs:
        if r.got is not None:
            r.same = np.array_equal(r.got.view(np.uint64), runs[0].got.view(np.uint64))
            r.ulps = InvarianceReport(impl.name, dtype, [runs[0], r]).spread()
            r.report = verify_outputs(rounded, r.got, dtype, max_ulps=max_ulps,
                                      accumulation=accumulation, name=impl.name)
    return InvarianceReport(impl.name, dtype, runs)
