"""Probes: derived value inputs that show what random outputs hide.

Random values of both signs cancel: an output is a small difference of large
terms, and a kernel whose shares are all 15% too large can still land within
a few ULPs of the exact output *at the size of its terms*.  A probe keeps the
call's queries, keys, mask and every modifier, and replaces only the values:

* ``ones``: every value is 1.  Each output is the sum of its row's shares:
  exactly 1 for a row that sees a key (less with a sink, 0 for an empty row
  under ``empty_row=zero``), so a normaliser error shows undiluted;
* ``identity``: value row ``j`` is the unit vector of column ``j - start``:
  output column ``c`` *is* the share of key ``start + c``, so the shares of a
  kernel that returns only outputs are checked one by one.  The keys are
  covered in blocks of the call's own value width ``E_v`` (the kernel sees
  the shape it was given); past :data:`IDENTITY_BLOCKS` blocks, that many
  blocks spread evenly from the first key to the last;
* ``positive``: the call's own values made non-negative, ``|value|``
  (exact in the dtype): no cancellation, every term adds.

Every probe value is a float of every dtype, so the kernel and the exact
reference read the same numbers.  On a probe every term an output adds is
non-negative, so its error in ULPs at the size of its terms is its plain ULP
error: a probe entry passes on the plain count alone, and no cancellation
can make up for a wrong normaliser.  An identity output is one share, whose
float error grows with its gap to the largest share of its row (``exp`` of
a difference of two rounded logits), so it is allowed ``ceil(2 ln(1 / p))``
more ULPs (and ``8 ceil(max |capped logit|)`` more under a
soft-cap, where a float ``tanh``'s error is carried times the cap into every
logit); the largest shares of a row keep the plain tolerance, so a
normaliser off by a factor fails.

>>> from exactattn.call import Call
>>> c = Call([[0], [1]], [[0], [1], [2]], [[-1], [2], [3]])
>>> [(p.name, p.keys, p.value[0, 0, :, 0].tolist()) for p in probe_values(c)]
... # doctest: +NORMALIZE_WHITESPACE
[('ones', None, [Fraction(1, 1), Fraction(1, 1), Fraction(1, 1)]),
 ('identity', (0, 1), [Fraction(1, 1), Fraction(0, 1), Fraction(0, 1)]),
 ('identity', (1, 2), [Fraction(0, 1), Fraction(1, 1), Fraction(0, 1)]),
 ('identity', (2, 3), [Fraction(0, 1), Fraction(0, 1), Fraction(1, 1)]),
 ('positive', None, [Fraction(1, 1), Fraction(2, 1), Fraction(3, 1)])]
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

import numpy as np

from ..errors import InputError
from ..options import check_choice

#: the probes verify runs by default, in this order
PROBES = ("ones", "identity", "positive")

#: at most this many blocks of identity columns per call (each is one more kernel run)
IDENTITY_BLOCKS = 4

_WHAT = {
    "ones": "values all 1: each output is its row's share sum (1 when the row sees a key)",
    "identity": "values = identity columns: each output is the share of one key",
    "positive": "values |value|: no cancellation, every term adds",
}


@dataclass(frozen=True)
class Probe:
    """One derived input: its ``name``, the value array (B x H_kv x S x E_v, exact
    ``Fraction`` entries) and, for ``identity``, the keys ``[start, stop)`` (0-based)
    whose shares its output columns are."""

    name: str
    value: np.ndarray
    keys: tuple[int, int] | None = None

    @property
    def label(self) -> str:
        """``ones``, ``identity keys 1..8`` (1-based, inclusive), ``positive``."""
        if self.keys is None:
            return self.name
        a, b = self.keys
        return f"{self.name} key {a + 1}" if b - a == 1 else f"{self.name} keys {a + 1}..{b}"

    @property
    def what(self) -> str:
        return _WHAT[self.name]

    def known(self, policy, rounded: float) -> Fraction | None:
        """The exact output, when it follows from the probe alone: on ``ones`` without a
        sink or dropout every output is its row's share sum, exactly 1 (a row that sees a
        key, or reads every key uniformly) or 0 (an empty row under ``empty_row=zero``), so
        the correctly rounded value ``rounded`` (1.0 or 0.0) tells which.  Else None.

        >>> from exactattn.call.policy import Policy
        >>> Probe("ones", None).known(Policy(), 1.0), Probe("ones", None).known(Policy(sink=1), 1.0)
        (Fraction(1, 1), None)
        """
        if self.name != "ones" or policy.sink is not None or policy.dropout is not None:
            return None
        return Fraction(1) if rounded == 1.0 else Fraction(0) if rounded == 0.0 else None


def check_probes(names) -> tuple[str, ...]:
    """``names`` as a tuple of known probe names, in :data:`PROBES` order, without repeats.

    ``"none"`` or an empty sequence: no probe; a comma-separated string is split.

    Raises:
        InputError: an unknown name (the message lists the known ones), or none beside
            another name.

    >>> check_probes("positive,ones"), check_probes("none")
    (('ones', 'positive'), ())
    """
    if isinstance(names, str):
        names = [] if names.strip() in ("", "none") else names.split(",")
    picked = {check_choice(str(n).strip(), "probe", PROBES + ("none",)) for n in names}
    if "none" in picked and len(picked) > 1:
        raise InputError(f"probe none must come alone (got {', '.join(sorted(picked))}); "
                         "drop none to run the others")
    return tuple(p for p in PROBES if p in picked)


def _starts(S: int, width: int) -> list[int]:
    """The first key of each identity block: every block, or IDENTITY_BLOCKS spread evenly."""
    blocks = -(-S // width)
    if blocks <= IDENTITY_BLOCKS:
        return [k * width for k in range(blocks)]
    last = blocks - 1
    return sorted({round(k * last / (IDENTITY_BLOCKS - 1)) * width
                   for k in range(IDENTITY_BLOCKS)})


def probe_values(call, names: Sequence[str] = PROBES) -> list[Probe]:
    """The probes ``names`` of ``call`` (a :class:`~exactattn.call.Call`), each a value array
    of the call's value shape.

    Raises:
        InputError: an unknown probe name.
    """
    names = check_probes(names)
    S, Ev = call.value.shape[2:]
    one, zero = Fraction(1), Fraction(0)
    out = []
    for name in names:
        if name == "ones":
            out.append(Probe(name, np.full(call.value.shape, one, dtype=object)))
        elif name == "identity":
            for start in _starts(S, Ev):
                v = np.full(call.value.shape, zero, dtype=object)
                for c in range(min(Ev, S - start)):
                    v[:, :, start + c, c] = one
                out.append(Probe(name, v, (start, min(start + Ev, S))))
        else:       # positive (check_probes refuses any other name)
            out.append(Probe(name, np.vectorize(abs, otypes=[object])(call.value)))
    return out
