"""The divisor experiment's exact expectations, certified (see :mod:`exactattn.scale`).

* ``E[s^2] = d_k`` undivided, 1 divided, so the expected standard deviation
  is ``sqrt(d_k)`` and 1 (:func:`expected_std`); the variance of one row's
  mean square is exactly ``d_k (d_k + 2) (n + 2) / n - d_k^2`` (over
  ``d_k^2`` divided; :func:`mean_square_variance`).
* ``E[range] = E|q| E[W_n]`` (over sqrt(d_k) divided; :func:`expected_range`),
  with ``E|q| = sqrt(2) Gamma((d_k + 1)/2) / Gamma(d_k/2)`` and ``E[W_n]``
  the expected range of n iid standard normals (:func:`expected_w`).

>>> expected_range(4, 4, divided=False, places=4)     # 3 sqrt(2 pi)/4 * 2.05875...
'3.8704'
>>> expected_range(2, 1, divided=False, places=6)       # 2/sqrt(pi) * sqrt(2/pi)
'0.900316'
>>> expected_std(16, False, 4), expected_std(2, False, 4), expected_std(2, True, 4)
('4.0000', '1.4142', '1.0000')
"""

from __future__ import annotations

import math
from fractions import Fraction

from ..numbers.digits import certify, round_fraction
from ..numbers.exact import rational_sqrt
from ..options import check_whole
from .limits import MAX_TOKENS, MAX_WIDTH

_W_CACHE: dict = {}


def expected_w(n: int, prec: int):
    """``E[W_n]``, the expected range of n iid standard normals, as an ``arb`` ball.

    ``E[W_n] = integral over R of 1 - Phi(x)^n - (1 - Phi(x))^n dx``, evaluated
    in ball arithmetic (python-flint ``acb.integral``, rigorous for this entire
    integrand) on [-T, T]; the two tails lie in ``[0, 2 n phi(T)]``
    (``0 <= integrand <= n (1 - Phi(|x|))`` and ``integral_T^oo (1 - Phi) <=
    phi(T)``), which is added as a ball.  Computed at ``prec`` bits (the caller
    sets python-flint's precision).

    >>> certify(lambda prec: expected_w(4, prec), 6)       # 12 atan(sqrt 2) / pi^(3/2)
    '2.058751'
    """
    from flint import acb, arb
    key = (n, prec)
    if key in _W_CACHE:
        return _W_CACHE[key]
    # tail cut: n phi(T) well below 2^-prec
    T = math.ceil(math.sqrt(2 * (prec + 8) * math.log(2) + 2 * math.log(2 * n))) + 1
    root2 = arb(2).sqrt()

    def integrand(x, analytic):  # entire in x: no branch cut to check
        below = (-x / root2).erfc() / 2  # Phi(x)
        above = (x / root2).erfc() / 2  # 1 - Phi(x)
        return 1 - below ** n - above ** n

    core = acb.integral(integrand, -T, T).real
    phi_T = (arb(-T * T) / 2).exp() / (2 * arb.pi()).sqrt()
    tails = (2 * n * phi_T).union(arb(0))  # both tails together lie in [0, 2 n phi(T)]
    value = core + tails
    _W_CACHE[key] = value
    return value


def _chi_mean(d_k: int):
    from flint import arb, fmpq
    return arb(2).sqrt() * (arb(fmpq(d_k + 1, 2)).lgamma() - arb(fmpq(d_k, 2)).lgamma()).exp()


def expected_range_ball(n: int, d_k: int, divided: bool, prec: int):
    """``E[max_j s_j - min_j s_j]`` for one row as an ``arb`` ball."""
    from flint import arb
    value = _chi_mean(d_k) * expected_w(n, prec)
    return value / arb(d_k).sqrt() if divided else value


def expected_range(n: int, d_k: int, *, divided: bool, places: int = 4) -> str:
    """The exact expected range of a row of n scores at width d_k, certified to ``places``.

    ``E|q| E[W_n]`` (divided by sqrt(d_k) when ``divided``); correctly rounded.

    Raises:
        InputError: n outside 2..MAX_TOKENS or d_k outside 1..MAX_WIDTH.

    >>> expected_range(4, 16, divided=True)
    '2.0269'
    """
    check_whole(n, "tokens", low=2, high=MAX_TOKENS)
    check_whole(d_k, "d_k", high=MAX_WIDTH)
    return certify(lambda prec: expected_range_ball(n, d_k, divided, prec), places)


def expected_std(d_k: int, divided: bool, places: int = 4) -> str:
    """``sqrt(E[s^2])``: sqrt(d_k) undivided, 1 divided, certified to ``places``."""
    check_whole(d_k, "d_k", high=MAX_WIDTH)
    root = Fraction(1) if divided else rational_sqrt(Fraction(d_k))
    if root is not None:
        return round_fraction(root, places)

    def ball(prec):
        from flint import arb
        return arb(d_k).sqrt()
    return certify(ball, places)


def certify_w(n: int, places: int) -> str:
    """``E[W_n]`` certified to ``places`` places.

    >>> certify_w(2, 6), certify_w(3, 6)       # 2/sqrt(pi), 3/sqrt(pi)
    ('1.128379', '1.692569')
    """
    return certify(lambda prec: expected_w(n, prec), places)


def mean_square_variance(n: int, d_k: int, divided: bool) -> Fraction:
    """Exact variance of one row's mean square ``(1/n) sum_j s_j^2``.

    The per-row mean square is ``|q|^2 C / n`` with ``|q|^2 ~ chi2(d_k)`` and
    ``C ~ chi2(n)`` independent, so its variance is ``d_k (d_k + 2) (n + 2) / n
    - d_k^2``; divided by ``d_k^2`` when the scores are divided by sqrt(d_k).

    >>> mean_square_variance(4, 4, False), mean_square_variance(4, 4, True)
    (Fraction(20, 1), Fraction(5, 4))
    """
    v = Fraction(d_k * (d_k + 2) * (n + 2), n) - d_k * d_k
    return v / (d_k * d_k) if divided else v
