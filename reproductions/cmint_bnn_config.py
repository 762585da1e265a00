"""The settings of ``reproduce cmint-bnn`` (Li and Wong 4.3.2): the methods compared, their learning rates and CMINT's
schedule, the ``--quick``/``--full`` presets, their checks, and the settings for the parsed options."""

from __future__ import annotations

import argparse
from typing import NamedTuple

import numpy as np

from minibatch_mcmc.acceptance.mint import mint
from minibatch_mcmc.checks import check_int, check_positive
from minibatch_mcmc.samplers.cmint import cmint_schedule
from reproductions.nn_baselines import sgd_optimizer
from reproductions.options import with_given, with_presets

METHODS = ("sgd", "sgd-m", "sgld", "mint", "cmint")
"""The compared methods, in the order they run."""


class BNNConfig(NamedTuple):
    """Settings of the Section 4.3.2 comparison (defaults: the reduced run)."""

    data: str = "auto"
    n_train: int = 10_000
    n_test: int = 10_000
    hidden: int = 200
    batch_size: int = 200
    epochs: int = 16
    sgd_lr: float = 0.09
    sgd_l2: float = 2e-5
    sgdm_lr: float = 0.012
    momentum: float = 0.9
    sgdm_l2: float = 3e-5
    sgld_lr: float = 0.03
    sgld_prior_scale: float = 1.0
    mint_lr: float = 0.01
    mint_alpha: float = 0.99
    mint_prior_scale: float | None = None
    """``None``: the paper's uniform prior for MINT and CMINT; else ``N(0, scale^2)``."""
    cmint_lr: float | None = None
    """CMINT's initial learning rate (default: ``mint_lr``)."""
    cycle_epochs: int = 4
    decay_every: int = 1
    decay: float = 0.9
    increase: float = 2.0
    cycles: int = 4
    methods: tuple = METHODS
    seed: int = 0


QUICK = dict(n_train=2000, n_test=2000, epochs=6, cycle_epochs=2, decay_every=1, cycles=3)
"""``--quick``: a 2,000-image subset, 6 epochs, CMINT with 3 rounds of 2 epochs."""
FULL = dict(n_train=50_000, n_test=10_000, epochs=500, cycle_epochs=50, decay_every=5, cycles=10)
"""``--full``: the paper's sizes (50,000 training images after the 10,000-image validation split)."""


def validate_config(cfg: BNNConfig) -> None:
    """Raise a ValueError naming the first bad setting."""
    unknown = [m for m in cfg.methods if m not in METHODS]
    if unknown or not cfg.methods:
        raise ValueError(f"methods={list(cfg.methods)!r}: choose a non-empty subset of {METHODS}")
    for name in ("n_train", "n_test", "hidden", "batch_size", "epochs", "cycle_epochs", "decay_every", "cycles"):
        check_int(getattr(cfg, name), name, 1)
    for name in ("sgd_lr", "sgdm_lr", "sgld_lr", "mint_lr", "sgld_prior_scale"):
        check_positive(getattr(cfg, name), name)
    if cfg.mint_prior_scale is not None and (not np.isfinite(cfg.mint_prior_scale) or cfg.mint_prior_scale <= 0):
        raise ValueError(
            f"mint_prior_scale={cfg.mint_prior_scale!r} must be a positive finite number (omit it for the uniform prior)"
        )
    if cfg.cmint_lr is not None and (not np.isfinite(cfg.cmint_lr) or cfg.cmint_lr <= 0):
        raise ValueError(f"cmint_lr={cfg.cmint_lr!r} must be a positive finite number")
    if cfg.batch_size > cfg.n_train:
        raise ValueError(f"batch_size={cfg.batch_size} exceeds n_train={cfg.n_train}")
    cmint_schedule(1.0, cfg.decay_every, cfg.decay, cfg.cycle_epochs, cfg.increase, cfg.cycles)  # r, factors, R, K
    mint(batch_size=cfg.batch_size, alpha=cfg.mint_alpha)
    sgd_optimizer(cfg.sgd_lr, 0.0, cfg.sgd_l2)
    sgd_optimizer(cfg.sgdm_lr, cfg.momentum, cfg.sgdm_l2)


def config_from(ns: argparse.Namespace) -> BNNConfig:
    """The settings for the parsed options (``--quick``/``--full`` presets, then the sizes given), checked."""
    if ns.num_samples:
        raise ValueError(
            f"--num-samples={ns.num_samples} does not apply to cmint-bnn, which counts epochs: use --epochs"
        )
    if ns.trials not in (None, 1):
        raise ValueError(f"--trials={ns.trials}: cmint-bnn runs one trial per seed; use --seed for another")
    cfg = BNNConfig(
        data=ns.data,
        hidden=ns.hidden,
        batch_size=ns.batch_size,
        sgd_lr=ns.sgd_lr,
        sgd_l2=ns.sgd_l2,
        sgdm_lr=ns.sgdm_lr,
        momentum=ns.momentum,
        sgdm_l2=ns.sgdm_l2,
        sgld_lr=ns.sgld_lr,
        sgld_prior_scale=ns.sgld_prior_scale,
        mint_lr=ns.mint_lr,
        mint_alpha=ns.mint_alpha,
        mint_prior_scale=ns.mint_prior_scale,
        cmint_lr=ns.cmint_lr,
        decay=ns.decay,
        increase=ns.increase,
        methods=tuple(ns.methods),
        seed=ns.seed,
    )
    cfg = with_presets(cfg, ns, QUICK, FULL)
    cfg = with_given(
        cfg,
        n_train=ns.n_train,
        n_test=ns.n_test,
        epochs=ns.epochs,
        cycle_epochs=ns.cycle_epochs,
        decay_every=ns.decay_every,
        cycles=ns.cycles,
    )
    validate_config(cfg)
    return cfg
