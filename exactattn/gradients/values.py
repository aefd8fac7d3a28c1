"""Gradient entries are :class:`~exactattn.numbers.ratio.ExpRatio` values over a block of rows.

:func:`GradValue` builds one from a recipe of a block's atoms; :func:`common_denominator_zero`
is the zero test of a sum ``const + sum_k N_k / Z_k^2`` over the generators of one block
(:meth:`ExpRatio.parts <exactattn.numbers.ratio.ExpRatio.parts>`).
"""

from __future__ import annotations

from ..numbers.ratio import ExpRatio, common_denominator_zero  # noqa: F401 (checks reads it)


def GradValue(block, recipe: dict, scaled: bool = False) -> ExpRatio:
    """The value ``sum_atom c_atom atom`` of a block's atoms (``("dQ", i, c)``, ...)."""
    return ExpRatio(recipe, block, scaled)
