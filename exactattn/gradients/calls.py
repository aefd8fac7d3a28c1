"""The exact gradients of every head of a call, read here by :mod:`exactattn.verify.backward`
(they live in ``exactattn/reference/backward.py``)."""

from ..reference.backward import ExactGradients, d_out_array  # noqa: F401
