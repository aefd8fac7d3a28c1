"""Split-KV kernels (docs/verify.md, `--split-merge`): a partial that returns one block's
(output, lse), a guarded merge, and two merges with a bug each."""
import numpy as np

def partial(query, key, value, *, attn_mask=None, scale=None, enable_gqa=False,
            return_lse=False, **kw):
    """One block's (output, lse); a row that sees no key of the block: (0, -inf)."""
    if enable_gqa:
        r = query.shape[-3] // key.shape[-3]
        key, value = np.repeat(key, r, axis=-3), np.repeat(value, r, axis=-3)
    s = query @ np.swapaxes(key, -1, -2) * (1 / np.sqrt(query.shape[-1]) if scale is None
                                            else scale)
    if attn_mask is not None:
        s = np.where(attn_mask, s, -np.inf) if attn_mask.dtype == bool else s + attn_mask
    top = s.max(axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0)
    w = np.exp(s - top)
    den = w.sum(axis=-1, keepdims=True)
    some = den > 0
    out = np.where(some, (w @ value) / np.where(some, den, 1), 0)
    lse = np.where(some, top + np.log(np.where(some, den, 1)), -np.inf)[..., 0]
    return out.astype(value.dtype), lse.astype(value.dtype)

def merge(states, sink=None):
    """lse = log(sum_b exp(lse_b) [+ exp(sink)]), out = sum_b exp(lse_b - lse) out_b;
    blocks at -inf skipped, a row with none left is (0, -inf).  Tensors (``--arrays torch``)
    are read as numpy arrays."""
    states = [(np.asarray(o), np.asarray(l)) for o, l in states]
    lses = [l.astype(np.float64) for _, l in states] + ([np.full_like(states[0][1], sink, np.float64)] if sink is not None else [])
    top = np.max(lses, axis=0)
    top = np.where(np.isfinite(top), top, 0)
    tot = sum(np.exp(l - top) for l in lses)
    lse = np.where(tot > 0, top + np.log(np.where(tot > 0, tot, 1)), -np.inf)
    at = np.where(np.isfinite(lse), lse, 0)
    out = sum(np.where(np.isfinite(l), np.exp(l.astype(np.float64) - at), 0)[..., None] * o
              for o, l in states)
    return out.astype(states[0][0].dtype), lse.astype(states[0][1].dtype)

def no_rescale(states):
    """Averages the blocks' outputs: no exp(lse_b - lse) weights."""
    lses = np.stack([l for _, l in states])
    top = lses.max(axis=0)
    return sum(o for o, _ in states) / len(states), top + np.log(np.exp(lses - top).sum(axis=0))

def textbook(states):
    """The textbook merge without a guard: two blocks at -inf give -inf - (-inf) = NaN."""
    lses = np.stack([l for _, l in states])
    top = lses.max(axis=0)
    with np.errstate(invalid="ignore"):
        lse = top + np.log(np.exp(lses - top).sum(axis=0))
        return sum(np.exp(l - lse)[..., None] * o for o, l in states), lse

