"""Summaries of float32 draws are computed in float64: ``summary()``, ``to_inference_data()`` and LOO's posterior mean.

ArviZ reduces in the dtype it is given and NumPy sums over the (chain, draw) axes of a ``(chain, draw, d)`` array
one value after another; in float32 the running sum's rounding grows with the number of draws times ``|mean|``.
The reference here is NumPy in float64 on the same float32 values, with a tolerance from float64 rounding:
any order of summing ``n`` values of size at most ``M`` is within ``n u M`` of the exact sum (``u = 2^-53``), and
the s.d. within about the same (its centring error enters squared, its per-term rounding as ``u M``).
"""

import jax
import numpy as np
import pytest

from minibatch_mcmc.samplers import RECORD_FIELDS, SampleResult

U64 = np.finfo(np.float64).eps / 2


def draws_result(positions) -> SampleResult:
    """A ``SampleResult`` holding the draws ``positions`` (leaves ``(chain, draw, ...)``) as sampled, with all-zero records."""
    chains, draws = jax.tree_util.tree_leaves(positions)[0].shape[:2]
    records = {k: np.zeros((chains, draws), np.float32) for k in RECORD_FIELDS}
    return SampleResult(positions, records, "test", 1, np.ones(draws), 0.0)


def float32_draws(shape: tuple, mean: np.ndarray, sd: np.ndarray, seed: int = 0) -> np.ndarray:
    """Independent normal draws rounded to float32 (a tall-data posterior: large ``|mean| / sd``)."""
    return (mean + sd * np.random.default_rng(seed).standard_normal(shape)).astype(np.float32)


def arviz_table(x64: np.ndarray):
    """ArviZ's unrounded summary of float64 draws (the reference for its diagnostics)."""
    import arviz as az

    return az.summary(az.convert_to_dataset({"theta": x64}), kind="all", round_to="none")


def check_table(table, x: np.ndarray) -> None:
    """Mean and s.d. within float64 rounding of NumPy's float64 ones; ESS, R-hat, MCSE, HDI as ArviZ's on float64 draws."""
    x64 = x.astype(np.float64)
    n, m = x.shape[0] * x.shape[1], float(np.abs(x64).max())
    tol = 2 * n * U64 * m
    np.testing.assert_allclose(table["mean"].to_numpy(), x64.mean(axis=(0, 1)), rtol=0, atol=tol)
    np.testing.assert_allclose(table["sd"].to_numpy(), x64.std(axis=(0, 1), ddof=1), rtol=0, atol=tol)
    ref = arviz_table(x64)
    for col in ("ess_bulk", "ess_tail", "r_hat", "mcse_mean", "mcse_sd", "hdi_3%", "hdi_97%"):
        np.testing.assert_allclose(table[col].to_numpy(), ref[col].to_numpy(), rtol=1e-9, err_msg=col)


def test_summary_of_tall_data_draws_is_float64_accurate():
    """Would catch a float32 reduction (or ArviZ's 3-decimal rounding) in ``summary()["posterior"]``: at 4 x 4000 draws
    of mean 1000 and s.d. 0.01, float32 puts the mean 8e-5 off (0.008 s.d.) against a float64 bound of 3.6e-9."""
    x = float32_draws((4, 4000, 2), np.array([1000.0, -3.0]), np.array([0.01, 1.0]))
    check_table(draws_result(x).summary()["posterior"], x)


def test_inference_data_is_float64_with_the_same_values():
    """Would catch ``to_inference_data`` handing ArviZ float32 draws (its ``summary``/``ess``/``loo`` would sum in float32)."""
    import arviz as az

    x = float32_draws((4, 4000, 2), np.array([1000.0, -3.0]), np.array([0.01, 1.0]))
    idata = draws_result(x).to_inference_data()
    assert idata.posterior["theta"].dtype == np.float64 and idata.sample_stats["epsilon"].dtype == np.float64
    np.testing.assert_array_equal(idata.posterior["theta"].values, x.astype(np.float64))
    check_table(az.summary(idata, kind="all", round_to="none"), x)


@pytest.mark.slow
def test_summary_at_the_issues_scale():
    """The issue's case: 4096 chains x 500 draws of a 3-parameter posterior with s.d. 0.01; float32 gave a mean 0.58 s.d.
    off and an s.d. 15% high with ESS 2e6 and R-hat 1.00."""
    x = float32_draws((4096, 500, 3), np.array([-0.5162, 1.0, 2.0]), np.array([0.0102, 0.01, 0.02]), seed=1)
    check_table(draws_result({"theta": x}).summary()["posterior"], x)
