"""Data of the Li and Wong 4.3.2 comparison (``reproduce cmint-bnn``): Fashion-MNIST, scikit-learn digits or a teacher network's labels."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from reproductions import mnist

DATASETS = ("auto", "fashion", "digits", "synthetic")
"""``auto``: Fashion-MNIST when installed, else scikit-learn digits; ``synthetic``: a teacher network's labels."""


def _read_split(directory: Path, prefix: str) -> tuple[np.ndarray, np.ndarray]:
    """All ten classes of one IDX split as ``(x float32 (n, 784) in [0, 1], y int32)``."""

    def path(stem: str) -> Path:
        for name in (stem, stem + ".gz"):
            if (directory / name).exists():
                return directory / name
        raise FileNotFoundError(
            f"{stem}[.gz] not found in {directory}: run `make data` (Debian's dataset-fashion-mnist)"
        )

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


def load_data(source: str, n_train: int, n_test: int, seed: int) -> tuple[dict, dict, str]:
    """``(train, test, description)`` for ``source`` (one of ``DATASETS``); training rows are a seeded subset of ``n_train``."""
    if source not in DATASETS:
        raise ValueError(f"data={source!r}; expected one of {DATASETS}")
    rng = np.random.default_rng(seed)
    kind = source
    if kind == "auto":
        kind = "fashion" if (mnist.DEBIAN_FASHION_DIR / "train-labels-idx1-ubyte.gz").exists() else "digits"
    if kind == "fashion":
        d = mnist.DEBIAN_FASHION_DIR
        x, y = _read_split(d, "train")
        # the paper holds out 10,000 training images for validation; keep the other 50,000 as the pool
        pool = rng.permutation(len(y))[10_000:]
        train = _subset(x[pool], y[pool], n_train, rng)
        xt, yt = _read_split(d, "t10k")
        test = _subset(xt, yt, n_test, rng)
        return train, test, f"Fashion-MNIST (10 classes): {len(train['y'])} training / {len(test['y'])} test images"
    if kind == "digits":
        from sklearn.datasets import load_digits

        dg = load_digits()
        x = (dg.images.reshape(len(dg.target), -1) / 16.0).astype(np.float32)
        y = dg.target.astype(np.int32)
        perm = rng.permutation(len(y))
        n_te = min(n_test, 500)
        te, tr = perm[:n_te], perm[n_te:]
        train = _subset(x[tr], y[tr], n_train, rng)
        return (
            train,
            {"x": x[te], "y": y[te]},
            f"scikit-learn digits (8 x 8, 10 classes): {len(train['y'])} training / {n_te} test",
        )
    data = synthetic_classification(seed, n_train + n_test)
    train = {k: v[:n_train] for k, v in data.items()}
    test = {k: v[n_train:] for k, v in data.items()}
    return train, test, f"synthetic teacher-network labels (20 inputs, 10 classes): {n_train} training / {n_test} test"
