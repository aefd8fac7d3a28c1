"""Exact integer products at the ends of int64 (numbers.bulk.exact_matmul, numbers.limbs)."""

def test_exact_matmul_at_the_int64_ends():
    """-2^63 and 2^63 - 1 entries: |min| does not overflow, and past mix's 2^62 the product
    goes through fmpz_mat; every entry equals the Python-int product."""
    import numpy as np
    from exactattn.numbers.bulk import exact_matmul
    from exactattn.numbers.limbs import abs_max
    a = np.array([[-2 ** 63, 3], [2 ** 63 - 1, -1]], dtype=np.int64)
    b = np.array([[1, -2 ** 63], [2 ** 62, 5]], dtype=np.int64)
    assert abs_max(a) == 2 ** 63 and abs_max(b) == 2 ** 63
    want = [[sum(int(a[i, t]) * int(b[t, j]) for t in range(2)) for j in range(2)] for i in range(2)]
    assert [[int(x) for x in row] for row in exact_matmul(a, b)] == want
