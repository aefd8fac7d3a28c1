"""A backward pass that forgets the - D_i term of dS = P (dP - D) (docs/gradients.md):
``exactattn verify --backward --impl mybwd:no_d``.  Any leading batch and head axes."""
import numpy as np


def no_d(query, key, value, grad_out, *, scale=None, is_causal=False):
    sc = 1 / np.sqrt(query.dtype.type(query.shape[-1])) if scale is None else query.dtype.type(scale)
    T = lambda a: np.swapaxes(a, -1, -2)
    s = (query @ T(key)) * sc
    if is_causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    ds = p * (grad_out @ T(value))               # should be p * (grad_out @ value^T - D)
    return ds @ key * sc, T(ds) @ query * sc, T(p) @ grad_out
