"""Why the divisor: random rows at several key widths, divided by sqrt(d_k) and not.

The experiment behind ``exactattn scale``.  At each
key width d_k, ``trials`` independent rows are drawn: one query q and n keys
k_1..k_n whose entries are independent standard normals.  A row's scores are
``s_j = q . k_j`` (undivided) and ``s_j / sqrt(d_k)`` (divided); both columns
come from the same draws.  For each we measure

* the **range** of a row, ``max_j s_j - min_j s_j``, averaged over the rows;
* the **standard deviation over all scores**, ``sqrt(mean of s_j^2)`` over
  every score of every row (measured about the exact mean 0);
* the **mean biggest share**, ``mean of max_j softmax(s)_j``;
* how many rows put **more than 0.99** of their share on one token.

Exact expectations, beside each measured spread (:mod:`.expect`):

* ``E[s_j^2] = d_k`` undivided, 1 divided (``E[q_m^2 k_m^2] = 1`` for each of
  the d_k terms), so the expected standard deviation is ``sqrt(d_k)`` and 1.
  The per-row mean square is ``|q|^2 C / n`` with ``|q|^2 ~ chi2(d_k)`` and
  ``C ~ chi2(n)`` independent, so its variance is exactly
  ``d_k (d_k + 2) (n + 2) / n - d_k^2`` (divided: over ``d_k^2``); the band
  uses this derived standard error.
* The scores of a row share q, so they are **not** independent; but given q
  they are iid ``N(0, |q|^2)``, so the range is ``|q| W_n`` with ``W_n`` the
  range of n iid standard normals, independent of ``|q|``::

      E[range] = E|q| E[W_n]      (divided: / sqrt(d_k))
      E|q|     = sqrt(2) Gamma((d_k + 1)/2) / Gamma(d_k/2)      (chi mean)
      E[W_n]   = integral over R of 1 - Phi(x)^n - (1 - Phi(x))^n dx

  The integral is evaluated in ball arithmetic (python-flint ``acb.integral``)
  with a certified tail bound, so the printed digits are certified.  For
  n = 2, 3, 4 it equals the closed forms ``2/sqrt(pi)``, ``3/sqrt(pi)`` and
  ``12 atan(sqrt(2)) / pi^(3/2)``.  The band for the range uses the standard
  error estimated from the sample.

A band is ``expected +- 3 standard errors`` of the mean; a measurement outside
its band is flagged ``NO``.  The band leans on the normal approximation to a
mean of ``trials`` rows, so even a correct experiment misses a band about 1
time in 370, and more often at small ``trials`` (under about 100), where the
approximation is rough: a miss is reported, never treated as a failure.

Limits (:mod:`.limits`; each a one-line error): d_k from 1 to
:data:`MAX_WIDTH` (65536), at most :data:`MAX_WIDTHS` widths, trials from 2
to :data:`MAX_TRIALS` (10,000,000), tokens from 2 to :data:`MAX_TOKENS`
(10,000), a seed from 0 to :data:`MAX_SEED` (2^64 - 1), and at most
:data:`MAX_DRAWS` (200,000,000) normal draws in all, ``trials x sum(widths) x
(tokens + 1)``.

Exactness: the samples are binary floats (``numpy.random.Generator`` with
PCG64, drawn in blocks; a Monte-Carlo experiment, so floats are what is being
measured) and the measured columns are float statistics printed to the
requested places; only the expectations are exact or certified.  The same
seed gives byte-identical output on the same machine (each width draws from
its own generator seeded by ``(seed, d_k, n)``, so a width's rows do not
depend on the other widths; :mod:`.draws`).

Modules: :mod:`.limits` (argument checks), :mod:`.expect` (the exact
expectations), :mod:`.draws` (the samples), :mod:`.report` (the tables).

Reference: Vaswani et al. 2017, sec. 3.2.1 (footnote 4: q.k has mean 0 and
variance d_k).

>>> expected_range(4, 4, divided=False, places=4)     # 3 sqrt(2 pi)/4 * 2.05875...
'3.8704'
>>> secs = scale_sections([4], trials=50, seed=1, tokens=4)
>>> [s.name for s in secs]
['scale/spread', 'scale/shares']
"""

from .draws import CONCENTRATED, ScaleResult, measure
from .expect import (certify_w, expected_range, expected_range_ball, expected_std, expected_w,
                     mean_square_variance)
from .limits import (DEFAULT_WIDTHS, MAX_DRAWS, MAX_SEED, MAX_TOKENS, MAX_TRIALS, MAX_WIDTH,
                     MAX_WIDTHS, check_draws, check_widths, parse_widths)
from .report import BAND_SE, run, scale_sections

