"""Several modes at temperature 1: x ~ N(theta^2, 1) has mirror modes +-sqrt(mean x). The warm-up finds both,
warns naming them, and starts chains in each with a proxy centred on it, so that R-hat flags what the sampler
cannot weigh; within the modes the draws match the quadrature posterior."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc.diagnostics import check_moments
from minibatch_mcmc.models.base import Model, gaussian_prior
from minibatch_mcmc.warmup import auto_sample, dispersed_starts, warmup


def squared_mean(n=2000, shift=0.25, seed=0):
    """``x ~ N(theta^2, 1)`` with prior ``N(0, 10^2)``; mean x ~ ``shift`` so the modes sit at +-sqrt(shift)."""
    rng = np.random.default_rng(seed)
    x = (shift + rng.standard_normal(n)).astype(np.float32)
    model = Model(
        log_prior=gaussian_prior(0.0, 10.0), log_lik=lambda th, b: -0.5 * (b - th[0] ** 2) ** 2, name="square"
    )
    return model, x


def half_line_moments(x, sign):
    """Posterior mean and variance of theta restricted to ``sign * theta > 0``, by quadrature in float64."""
    root = np.sqrt(max(x.mean(), 1e-6))
    grid = sign * np.linspace(max(root - 1.0, 0.0), root + 1.0, 20001)
    xs, xss, n = x.astype(np.float64).sum(), (x.astype(np.float64) ** 2).sum(), x.size
    logp = -0.5 * (xss - 2 * grid**2 * xs + n * grid**4) - 0.5 * grid**2 / 100.0
    w = np.exp(logp - logp.max())
    w /= w.sum()
    mean = w @ grid
    return mean, w @ (grid - mean) ** 2


def test_mirror_modes_warn_and_chains_start_in_both():
    """Before: no warning, every chain around one Laplace fit. Now: a warning naming both modes and their log
    densities; chains 0 and 2 start in one mode, 1 and 3 in the other, whose proxy is centred on it."""
    model, x = squared_mean()
    with pytest.warns(
        UserWarning, match=r"2 modes \(mode 0: theta = \[0\.\d+\], log density -\d+.*mode 1: theta = \[-0\.\d+\]"
    ):
        w = warmup(model, x, jnp.asarray([1.0]), key=0, num_windows=2, window_size=20)
    root = float(np.sqrt(x.mean()))
    assert [round(float(m.theta[0]), 2) for m in w.modes] == [round(root, 2), -round(root, 2)]
    assert len(w.mode_kernels) == 1 and round(float(w.mode_kernels[0][0].centre[0]), 2) == -round(root, 2)
    assert (w.kind, w.why) == (
        "mixture",
        "rule: 2 modes",
    )  # no proposal named: the rule guards proxy HMC with a random walk
    starts = np.asarray(dispersed_starts(w, 4, jax.random.key(0)))[:, 0]
    assert np.all(starts[::2] > 0) and np.all(starts[1::2] < 0), starts


@pytest.mark.slow
def test_rhat_flags_the_modes_and_each_mode_is_sampled_right():
    """auto_sample on the mirror modes: R-hat > 1.5 across chains, chains 0, 2 mostly in the positive mode and 1, 3
    in the negative one (each group with its own proxy; rare crossings are allowed); |theta| over all chains
    matches the quadrature moments of the half-line posterior (its exact law, by symmetry) within |z| < 4 at
    ESS > 1500 (a 5% s.d. error shows as z > 4). The weights of the modes are not checked: see the warning.
    Proxy HMC is named: with none named the warm-up's rule takes ``mixture`` for the two modes, whose random walk
    crosses between them more (key 1: R-hat 1.44, 91% and 95% of the draws in the chains' own modes; |theta|'s
    z of the mean 0.52, of the variance 1.33), which flags the modes less sharply than this test asks."""
    model, x = squared_mean(n=10_000, shift=0.04)
    with pytest.warns(UserWarning, match="2 modes"):
        res, w = auto_sample(
            model,
            x,
            jnp.asarray([1.0]),
            num_samples=6000,
            num_chains=4,
            key=1,
            progress=False,
            block_size=2000,
            proposal="proxy_hmc",
        )
    draws = np.asarray(res.positions)[:, 500:, 0]
    import arviz as az

    assert float(az.rhat(draws)) > 1.5
    assert np.mean(draws[::2] > 0) > 0.9 and np.mean(draws[1::2] < 0) > 0.9
    mean, var = half_line_moments(x, 1.0)  # the posterior is symmetric: |theta| has the half-line law
    chk = check_moments(np.abs(draws), np.array([mean]), np.array([var]))
    assert np.all(chk.ess > 1500), chk.ess
    assert np.all(np.abs(chk.z_mean()) < 4) and np.all(np.abs(chk.z_var()) < 4), (chk.z_mean(), chk.z_var())
