"""Li and Wong Section 4.3.2: test error by epoch of a Bayesian MLP for SGD, SGD-M, SGLD, MINT and CMINT's ensemble.

``minibatch-mcmc reproduce cmint-bnn`` trains the 784-200-10 ReLU network on Fashion-MNIST (10
classes; Debian's package from ``make data``), or on scikit-learn's 8 x 8 digits when that is
missing, with the paper's minibatch size 200 and the learning rates of its Table 2. MINT uses an
SGLD (Langevin) proposal followed by the MINT test with ``lambda = 0.99 tau`` and a uniform prior;
its estimate at each epoch is the average of all samples so far (also reported: the posterior
predictive, the mean softmax of the epoch-end samples). CMINT adds the cyclic step-size schedule
and predicts with the average softmax of its snapshots. MINT's default learning rate is 0.01, not
the paper's 0.22: in our units 0.22 is almost never accepted (see ``docs/parts/cmint-bnn.md``). The default is a reduced run (a
10,000-image training subset, 16 epochs, CMINT with 4 rounds of 4 epochs); ``--full`` gives the
paper's 50,000 images, 500 epochs and 10 rounds of 50 epochs (far too slow for a small CPU).

Step sizes are given as learning rates ``lr`` on the mean log-likelihood, as for SGD: a Langevin
step targeting a likelihood tempered by ``T`` (1 for SGLD, ``n^(1 - lambda)`` for MINT) uses
``alpha = 2 lr T / N``.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from minibatch_mcmc.acceptance.mint import mint
from minibatch_mcmc.data import mnist
from minibatch_mcmc.experiments.nn_baselines import make_sgd_epoch, make_sgld_epoch, sgd_optimizer, weights_mask
from minibatch_mcmc.models.mlp import bayesian_mlp, check_classification_data, error_rate, init_mlp, predict_proba
from minibatch_mcmc.samplers.cmint import cmint, cmint_schedule, ensemble_predict_proba, make_epoch_runner, run_langevin_epochs

PyTree = Any
METHODS = ("sgd", "sgd-m", "sgld", "mint", "cmint")
"""The compared methods, in the order they run."""
DATASETS = ("auto", "fashion", "digits", "synthetic")
"""``auto``: Fashion-MNIST when installed, else scikit-learn digits; ``synthetic``: a teacher network's labels."""


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


def _read_split(directory: Path, prefix: str) -> tuple[np.ndarray, np.ndarray]:
    """All ten classes of one IDX split as ``(x float32 (n, 784) in [0, 1], y int32)``."""
    def path(stem: str) -> Path:
        for name in (stem, stem + ".gz"):
            if (directory / name).exists():
                return directory / name
        raise FileNotFoundError(f"{stem}[.gz] not found in {directory}: run `make data` (Debian's dataset-fashion-mnist)")

    images = mnist.read_idx(path(f"{prefix}-images-idx3-ubyte"))
    labels = mnist.read_idx(path(f"{prefix}-labels-idx1-ubyte"))
    return images.reshape(images.shape[0], -1).astype(np.float32) / 255.0, labels.astype(np.int32)


def _subset(x: np.ndarray, y: np.ndarray, n: int, rng: np.random.Generator) -> dict:
    """A seeded random subset of ``n`` rows (all rows when ``n`` is at least their number)."""
    if n >= len(y):
        return {"x": x, "y": y}
    idx = np.sort(rng.choice(len(y), size=n, replace=False))
    return {"x": x[idx], "y": y[idx]}


def synthetic_classification(seed: int, n: int, d: int = 20, classes: int = 10) -> dict:
    """Inputs ``N(0, I_d)`` labelled by the argmax of a random teacher MLP ``d-32-classes`` (learnable, noise-free)."""
    rng = np.random.default_rng(seed)
    teacher = [rng.normal(size=(d, 32)) / np.sqrt(d), rng.normal(size=(32, classes)) / np.sqrt(32)]
    x = rng.normal(size=(n, d)).astype(np.float32)
    y = np.argmax(np.maximum(x @ teacher[0], 0.0) @ teacher[1], axis=1).astype(np.int32)
    return {"x": x, "y": y}


def load_data(cfg: BNNConfig) -> tuple[dict, dict, str]:
    """``(train, test, description)`` for ``cfg.data``; training rows are a seeded subset of ``n_train``."""
    if cfg.data not in DATASETS:
        raise ValueError(f"data={cfg.data!r}; expected one of {DATASETS}")
    rng = np.random.default_rng(cfg.seed)
    kind = cfg.data
    if kind == "auto":
        kind = "fashion" if (mnist.DEBIAN_FASHION_DIR / "train-labels-idx1-ubyte.gz").exists() else "digits"
    if kind == "fashion":
        d = mnist.DEBIAN_FASHION_DIR
        x, y = _read_split(d, "train")
        # the paper holds out 10,000 training images for validation; keep the other 50,000 as the pool
        pool = rng.permutation(len(y))[10_000:]
        train = _subset(x[pool], y[pool], cfg.n_train, rng)
        xt, yt = _read_split(d, "t10k")
        test = _subset(xt, yt, cfg.n_test, rng)
        return train, test, f"Fashion-MNIST (10 classes): {len(train['y'])} training / {len(test['y'])} test images"
    if kind == "digits":
        from sklearn.datasets import load_digits

        dg = load_digits()
        x = (dg.images.reshape(len(dg.target), -1) / 16.0).astype(np.float32)
        y = dg.target.astype(np.int32)
        perm = rng.permutation(len(y))
        n_te = min(cfg.n_test, 500)
        te, tr = perm[:n_te], perm[n_te:]
        train = _subset(x[tr], y[tr], cfg.n_train, rng)
        return train, {"x": x[te], "y": y[te]}, f"scikit-learn digits (8 x 8, 10 classes): {len(train['y'])} training / {n_te} test"
    data = synthetic_classification(cfg.seed, cfg.n_train + cfg.n_test)
    train = {k: v[: cfg.n_train] for k, v in data.items()}
    test = {k: v[cfg.n_train :] for k, v in data.items()}
    return train, test, f"synthetic teacher-network labels (20 inputs, 10 classes): {cfg.n_train} training / {cfg.n_test} test"


def validate_config(cfg: BNNConfig) -> None:
    """Raise a ValueError naming the first bad setting."""
    unknown = [m for m in cfg.methods if m not in METHODS]
    if unknown or not cfg.methods:
        raise ValueError(f"methods={list(cfg.methods)!r}: choose a non-empty subset of {METHODS}")
    for name in ("n_train", "n_test", "hidden", "batch_size", "epochs", "cycle_epochs", "decay_every", "cycles"):
        v = getattr(cfg, name)
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name}={v!r} must be a positive integer")
    for name in ("sgd_lr", "sgdm_lr", "sgld_lr", "mint_lr", "sgld_prior_scale"):
        v = getattr(cfg, name)
        if not np.isfinite(v) or v <= 0:
            raise ValueError(f"{name}={v!r} must be a positive finite number")
    if cfg.mint_prior_scale is not None and (not np.isfinite(cfg.mint_prior_scale) or cfg.mint_prior_scale <= 0):
        raise ValueError(f"mint_prior_scale={cfg.mint_prior_scale!r} must be a positive finite number (omit it for the uniform prior)")
    if cfg.cmint_lr is not None and (not np.isfinite(cfg.cmint_lr) or cfg.cmint_lr <= 0):
        raise ValueError(f"cmint_lr={cfg.cmint_lr!r} must be a positive finite number")
    if cfg.batch_size > cfg.n_train:
        raise ValueError(f"batch_size={cfg.batch_size} exceeds n_train={cfg.n_train}")
    cmint_schedule(1.0, cfg.decay_every, cfg.decay, cfg.cycle_epochs, cfg.increase, cfg.cycles)  # r, factors, R, K
    mint(batch_size=cfg.batch_size, alpha=cfg.mint_alpha)
    sgd_optimizer(cfg.sgd_lr, 0.0, cfg.sgd_l2)
    sgd_optimizer(cfg.sgdm_lr, cfg.momentum, cfg.sgdm_l2)


def _zeros(tree: PyTree) -> PyTree:
    """Host-side (numpy float64) zeros shaped like ``tree``, for running sums without extra compiles."""
    return jax.tree_util.tree_map(lambda a: np.zeros(np.shape(a), np.float64), tree)


def _add(total: PyTree, part: PyTree) -> PyTree:
    """``total + part`` on the host."""
    return jax.tree_util.tree_map(lambda a, b: a + np.asarray(b, np.float64), total, jax.device_get(part))


def _scale(tree: PyTree, factor: float) -> PyTree:
    """``factor * tree`` as float32 numpy arrays (the parameters' dtype)."""
    return jax.tree_util.tree_map(lambda a: (a * factor).astype(np.float32), tree)


def _error_fn(test: dict):
    """A jitted ``params -> test probabilities`` on the fixed test set."""
    x = jnp.asarray(test["x"])
    return jax.jit(lambda p: predict_proba(p, x))


def run(cfg: BNNConfig, out: Path, progress: bool = True) -> str:
    """Run the comparison, write ``test_error.csv``, ``summary.json`` and ``test_error.png`` under ``out``; return a table."""
    validate_config(cfg)
    train, test, described = load_data(cfg)
    sizes = (train["x"].shape[1], cfg.hidden, 10)
    n = check_classification_data(train, sizes)
    check_classification_data(test, sizes)
    out.mkdir(parents=True, exist_ok=True)
    probs = _error_fn(test)
    y_test = test["y"]
    data = jax.tree_util.tree_map(jnp.asarray, train)
    init = init_mlp(jax.random.key(cfg.seed), sizes)
    rows: list[tuple[int, str, str, float]] = []
    info: dict[str, dict] = {}
    log = print if progress else (lambda *a, **k: None)
    log(described, flush=True)

    pred_sums: dict[str, np.ndarray] = {}

    def record(method: str, estimator: str, epoch: int, params: PyTree) -> float:
        p = np.asarray(probs(params), np.float64)
        err = error_rate(p, y_test)
        rows.append((epoch, method, estimator, err))
        if estimator == "current" and method in ("sgld", "mint"):  # posterior predictive: mean softmax of epoch-end samples
            pred_sums[method] = pred_sums.get(method, 0.0) + p
            rows.append((epoch, method, "predictive", error_rate(pred_sums[method], y_test)))
        return err

    mint_model = bayesian_mlp(sizes, cfg.mint_prior_scale)  # None: the paper's uniform prior for MINT
    test_mint = mint(batch_size=cfg.batch_size, alpha=cfg.mint_alpha)
    runners: list = []  # MINT and CMINT share one compiled epoch

    for method in cfg.methods:
        start = time.perf_counter()
        key = jax.random.fold_in(jax.random.key(cfg.seed), METHODS.index(method) + 1)
        if method in ("sgd", "sgd-m"):
            lr, mom, l2 = (cfg.sgd_lr, 0.0, cfg.sgd_l2) if method == "sgd" else (cfg.sgdm_lr, cfg.momentum, cfg.sgdm_l2)
            opt = sgd_optimizer(lr, momentum=mom, l2=l2, decay_mask=weights_mask(init))
            epoch_fn = make_sgd_epoch(bayesian_mlp(sizes, None), n, cfg.batch_size, opt)
            params, state = init, epoch_fn.init(init)
            for e in range(cfg.epochs):
                params, state, loss = epoch_fn.run(jax.random.fold_in(key, e), params, state, data)
                err = record(method, "current", e + 1, params)
                log(f"  {method} epoch {e + 1}: train loss {float(loss):.3f}, test error {err:.4f}", flush=True)
            info[method] = {"learning_rate": lr, "momentum": mom, "l2": l2}
        elif method == "sgld":
            model = bayesian_mlp(sizes, cfg.sgld_prior_scale)
            epoch_fn = make_sgld_epoch(model, n, cfg.batch_size)
            params, total, count = init, _zeros(init), 0
            for e in range(cfg.epochs):
                params, s = epoch_fn(jax.random.fold_in(key, e), params, data, np.float32(cfg.sgld_lr))
                total, count = _add(total, s), count + n // cfg.batch_size
                record(method, "current", e + 1, params)
                err = record(method, "average", e + 1, _scale(total, 1.0 / count))
                log(f"  sgld epoch {e + 1}: test error of the sample average {err:.4f}", flush=True)
            info[method] = {"learning_rate": cfg.sgld_lr, "prior_scale": cfg.sgld_prior_scale, "alpha": 2 * cfg.sgld_lr / n}
        else:
            model = mint_model
            s = test_mint.settings(n)
            if not runners:
                runners.append(make_epoch_runner(model, test_mint, n, cfg.batch_size, max(1, n // cfg.batch_size), s.temperature))
            to_alpha = 2.0 * s.temperature / n
            acc_log: list[float] = []
            if method == "mint":
                acc = {"total": _zeros(init), "count": 0}

                def on_epoch(epoch, st, stats, acc=acc):
                    acc["total"] = _add(acc["total"], stats.position_sum)
                    acc["count"] += n // cfg.batch_size
                    record("mint", "current", epoch, st.position)
                    err = record("mint", "average", epoch, _scale(acc["total"], 1.0 / acc["count"]))
                    log(f"  mint epoch {epoch}: acceptance {float(stats.acceptance_rate):.2f}, test error of the sample average {err:.4f}", flush=True)

                res = run_langevin_epochs(
                    model, data, init, step_sizes=np.full(cfg.epochs, cfg.mint_lr * to_alpha), batch_size=cfg.batch_size,
                    test=test_mint, key=key, callback=on_epoch, runner=runners[0],
                )
                info[method] = {"learning_rate": cfg.mint_lr}
            else:
                lr0 = cfg.mint_lr if cfg.cmint_lr is None else cfg.cmint_lr
                sched = cmint_schedule(lr0 * to_alpha, cfg.decay_every, cfg.decay, cfg.cycle_epochs, cfg.increase, cfg.cycles)
                snaps: list = []

                def on_epoch(epoch, st, stats, snaps=snaps):
                    record("cmint", "current", epoch, st.position)
                    line = f"  cmint epoch {epoch}: lr {sched.step_size_at(epoch - 1) / to_alpha:.4f}, acceptance {float(stats.acceptance_rate):.2f}"
                    if epoch in sched.snapshot_epochs():
                        snaps.append(st.position)
                        err = error_rate(ensemble_predict_proba(lambda p, _: probs(p), snaps, None), y_test)
                        rows.append((epoch, "cmint", "ensemble", err))
                        line += f", snapshot {len(snaps)}: ensemble test error {err:.4f}"
                    log(line, flush=True)

                res = cmint(
                    model, data, init, sched, batch_size=cfg.batch_size, test=test_mint, key=key, callback=on_epoch, runner=runners[0]
                )
                info[method] = {
                    "initial_learning_rate": lr0, "r": cfg.decay_every, "decay": cfg.decay, "R": cfg.cycle_epochs,
                    "increase": cfg.increase, "K": cfg.cycles, "snapshot_epochs": list(res.snapshot_epochs),
                    "learning_rate_by_epoch": (sched.epoch_step_sizes() / to_alpha).tolist(),
                }
            acc_log = res.acceptance.tolist()
            info[method].update(
                {"prior_scale": cfg.mint_prior_scale, "tau": s.tau, "lambda": s.lam, "temperature": s.temperature, "test_batch_size": s.batch_size,
                 "acceptance_by_epoch": acc_log, "alpha_per_lr": to_alpha}
            )
        info[method]["wall_s"] = time.perf_counter() - start

    with open(out / "test_error.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["epoch", "method", "estimator", "test_error"])
        w.writerows(rows)
    (out / "summary.json").write_text(json.dumps({"config": cfg._asdict(), "data": described, "methods": info}, indent=1))
    table = format_table(rows, info)
    (out / "table.txt").write_text(described + "\n" + table + "\n")
    plot_test_error(rows, out / "test_error.png", described)
    return table


def final_errors(rows: list[tuple[int, str, str, float]]) -> dict[str, tuple[int, str, float]]:
    """Per method, the last recorded ``(epoch, estimator, error)`` of its reported estimator."""
    reported = {"sgd": "current", "sgd-m": "current", "sgld": "average", "mint": "average", "cmint": "ensemble"}
    out = {}
    for epoch, method, est, err in rows:
        if est == reported[method]:
            out[method] = (epoch, est, err)
    return out


def format_table(rows: list[tuple[int, str, str, float]], info: dict) -> str:
    """A plain-text table of final and best test errors, wall time and mean acceptance."""
    lines = [f"{'method':<7} {'estimator':<9} {'epochs':>6} {'final err':>9} {'best err':>9} {'wall s':>7} {'accept':>6}"]
    for method, (epoch, est, err) in final_errors(rows).items():
        best = min(r[3] for r in rows if r[1] == method and r[2] == est)
        acc = info[method].get("acceptance_by_epoch")
        acc_s = f"{np.mean(acc):6.2f}" if acc else f"{'-':>6}"
        lines.append(f"{method:<7} {est:<9} {epoch:>6} {err:>9.4f} {best:>9.4f} {info[method]['wall_s']:>7.1f} {acc_s}")
    return "\n".join(lines)


def plot_test_error(rows: list[tuple[int, str, str, float]], path: Path, title: str) -> None:
    """Test error against epochs for each method (Figure 3's layout); CMINT's final ensemble as a dashed line.

    SGLD and MINT are drawn with the paper's estimator (the average of the samples, solid) and the
    posterior predictive (the mean softmax of epoch-end samples, dotted).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    finals = final_errors(rows)
    for method, (_, est, _) in finals.items():
        if method == "cmint":
            continue
        pts = [(r[0], r[3]) for r in rows if r[1] == method and r[2] == est]
        (line,) = ax.plot(*zip(*pts), label=f"{method.upper()} ({est})" if est != "current" else method.upper())
        pred = [(r[0], r[3]) for r in rows if r[1] == method and r[2] == "predictive"]
        if pred:
            ax.plot(*zip(*pred), ls=":", color=line.get_color(), label=f"{method.upper()} (predictive)")
    if "cmint" in finals:
        ax.axhline(finals["cmint"][2], color="k", ls="--", label=f"CMINT ensemble ({finals['cmint'][0]} epochs)")
    ax.set_xlabel("epoch")
    ax.set_ylabel("test error")
    ax.set_title(title, fontsize=8)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def build_parser() -> argparse.ArgumentParser:
    """This experiment's own options (the ones after ``reproduce cmint-bnn``)."""
    p = argparse.ArgumentParser(prog="minibatch-mcmc reproduce cmint-bnn", add_help=False, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--help-experiment", action="help", help="show these options and exit")
    d = BNNConfig()
    # not --data: the shared parser would take it as an abbreviation of its own --dataset
    p.add_argument("--source", dest="data", choices=DATASETS, default=d.data, help="auto: Fashion-MNIST if installed, else digits")
    p.add_argument("--full", action="store_true", help="the paper's sizes: 50,000 images, 500 epochs, R=50, r=5, K=10")
    p.add_argument("--n-train", type=int, default=None, help=f"training images (default {d.n_train})")
    p.add_argument("--n-test", type=int, default=None, help=f"test images (default {d.n_test})")
    p.add_argument("--epochs", type=int, default=None, help=f"epochs for SGD, SGD-M, SGLD, MINT (default {d.epochs})")
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--hidden", type=int, default=d.hidden, help="hidden ReLU units (default 200)")
    p.add_argument("--methods", default=",".join(METHODS), help="comma-separated subset of " + ",".join(METHODS))
    for name, help_ in (("sgd-lr", "SGD"), ("sgdm-lr", "SGD-M"), ("sgld-lr", "SGLD"), ("mint-lr", "MINT's SGLD proposal")):
        p.add_argument(f"--{name}", type=float, default=getattr(d, name.replace("-", "_")), help=f"{help_} learning rate")
    p.add_argument("--cmint-lr", type=float, default=None, help="CMINT's initial learning rate (default: --mint-lr)")
    p.add_argument("--mint-alpha", type=float, default=d.mint_alpha, help="lambda / tau (default 0.99)")
    p.add_argument("--sgd-l2", type=float, default=d.sgd_l2)
    p.add_argument("--sgdm-l2", type=float, default=d.sgdm_l2)
    p.add_argument("--momentum", type=float, default=d.momentum)
    p.add_argument("--sgld-prior-scale", type=float, default=d.sgld_prior_scale)
    p.add_argument("--mint-prior-scale", type=float, default=None, help="N(0, s^2) prior for MINT/CMINT (default: uniform)")
    p.add_argument("--cycle-epochs", type=int, default=None, help=f"CMINT's R (default {d.cycle_epochs})")
    p.add_argument("--decay-every", type=int, default=None, help=f"CMINT's r (default {d.decay_every})")
    p.add_argument("--decay", type=float, default=d.decay, help="CMINT's factor every r epochs (default 0.9)")
    p.add_argument("--increase", type=float, default=d.increase, help="CMINT's factor after each round (default 2)")
    p.add_argument("--cycles", type=int, default=None, help=f"CMINT's K (default {d.cycles})")
    return p


def config_from_args(args: argparse.Namespace, extra: list[str]) -> BNNConfig:
    """Combine the shared CLI options (``--quick``, ``--seed``) with this experiment's own."""
    ns = build_parser().parse_args(extra)
    if getattr(args, "num_samples", None):
        raise ValueError(f"--num-samples={args.num_samples} does not apply to cmint-bnn, which counts epochs: use --epochs")
    if getattr(args, "trials", None) not in (None, 1):
        raise ValueError(f"--trials={args.trials}: cmint-bnn runs one trial per seed; use --seed for another")
    methods = tuple(m.strip() for m in ns.methods.split(",") if m.strip())
    cfg = BNNConfig(
        data=ns.data, hidden=ns.hidden, batch_size=ns.batch_size, sgd_lr=ns.sgd_lr, sgd_l2=ns.sgd_l2, sgdm_lr=ns.sgdm_lr,
        momentum=ns.momentum, sgdm_l2=ns.sgdm_l2, sgld_lr=ns.sgld_lr, sgld_prior_scale=ns.sgld_prior_scale,
        mint_lr=ns.mint_lr, mint_alpha=ns.mint_alpha, mint_prior_scale=ns.mint_prior_scale, cmint_lr=ns.cmint_lr, decay=ns.decay, increase=ns.increase,
        methods=methods, seed=int(getattr(args, "seed", 0) or 0),
    )
    if ns.full and getattr(args, "quick", False):
        raise ValueError("--full and --quick are mutually exclusive")
    if ns.full:
        cfg = cfg._replace(**FULL)
    elif getattr(args, "quick", False):
        cfg = cfg._replace(**QUICK)
    for name in ("n_train", "n_test", "epochs", "cycle_epochs", "decay_every", "cycles"):
        if getattr(ns, name) is not None:
            cfg = cfg._replace(**{name: getattr(ns, name)})
    validate_config(cfg)
    return cfg


def run_cli(args: argparse.Namespace, extra: list[str]) -> int:
    """Entry point for ``minibatch-mcmc reproduce cmint-bnn [options]``."""
    cfg = config_from_args(args, extra)
    out = Path(getattr(args, "out", "runs")) / (getattr(args, "name", None) or "cmint-bnn")
    print(
        f"Li and Wong 4.3.2: MLP {cfg.hidden} hidden units, batch {cfg.batch_size}, {cfg.epochs} epochs; "
        f"CMINT {cfg.cycles} rounds of {cfg.cycle_epochs} epochs (r={cfg.decay_every}); methods {', '.join(cfg.methods)}",
        flush=True,
    )
    table = run(cfg, out, progress=not getattr(args, "no_progress", False))
    print(table)
    print(f"\nwrote {out}/: " + ", ".join(sorted(p.name for p in out.iterdir())))
    return 0
