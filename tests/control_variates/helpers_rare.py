"""A rare category in a logistic regression: ``x_i = (1, rare_i)``; 100,000 common rows, 20 rare ones with 19 successes."""

from __future__ import annotations

import numpy as np

PRIOR_SCALE = 5.0


def rare_category_data(
    n_common: int = 100_000, n_rare: int = 20, rare_successes: int = 19, seed: int = 0
) -> tuple[dict, np.ndarray]:
    """Half the common rows succeed; the rare rows sit at evenly spaced indices. Returns the data and their indices."""
    rng = np.random.default_rng(seed)
    n = n_common + n_rare
    idx = np.linspace(11, n - 11, n_rare).round().astype(int)
    rare = np.zeros(n, bool)
    rare[idx] = True
    y = np.zeros(n, np.int32)
    y[rng.permutation(np.flatnonzero(~rare))[: n_common // 2]] = 1
    y[idx[:rare_successes]] = 1
    x = np.column_stack([np.ones(n), rare.astype(np.float64)]).astype(np.float32)
    return {"x": x, "y": y}, idx


def posterior_rare_coefficient(data: dict, points: int = 2001) -> tuple[float, float]:
    """Mean and s.d. of the rare category's coefficient by 2-d quadrature in float64 (from the four counts)."""
    x, y = np.asarray(data["x"]), np.asarray(data["y"])
    rare = x[:, 1] > 0
    n0, k0, n1, k1 = (~rare).sum(), y[~rare].sum(), rare.sum(), y[rare].sum()
    a = np.linspace(-0.05, 0.05, 401)[:, None]
    b = np.linspace(-10.0, 25.0, points)[None, :]

    def log_sig(z):
        return -np.logaddexp(0.0, -z)

    lp = (
        k0 * log_sig(a)
        + (n0 - k0) * log_sig(-a)
        + k1 * log_sig(a + b)
        + (n1 - k1) * log_sig(-(a + b))
        - 0.5 * (a**2 + b**2) / PRIOR_SCALE**2
    )
    p = np.exp(lp - lp.max())
    pb = p.sum(axis=0)
    pb /= pb.sum()
    mean = float(b[0] @ pb)
    return mean, float(np.sqrt(((b[0] - mean) ** 2) @ pb))
