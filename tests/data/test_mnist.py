import gzip

import numpy as np
import pytest

from minibatch_mcmc.data import mnist


def write_idx(path, arr: np.ndarray, code: int = 0x08):
    header = bytes([0, 0, code, arr.ndim]) + np.asarray(arr.shape, ">u4").tobytes()
    data = header + arr.astype(np.uint8).tobytes()
    if str(path).endswith(".gz"):
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_idx_round_trip_and_two_class_loading(tmp_path, suffix):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (30, 28, 28), dtype=np.uint8)
    labels = np.arange(30, dtype=np.uint8) % 10
    write_idx(tmp_path / f"train-images-idx3-ubyte{suffix}", images)
    write_idx(tmp_path / f"train-labels-idx1-ubyte{suffix}", labels)
    np.testing.assert_array_equal(mnist.read_idx(tmp_path / f"train-images-idx3-ubyte{suffix}"), images)
    d = mnist.load_mnist_dir(tmp_path, classes=(1, 7), split="train")
    assert d["x"].shape == (6, 784) and d["x"].dtype == np.float32
    assert d["x"].max() <= 1.0 and d["y"].tolist() == [0, 1, 0, 1, 0, 1]
    np.testing.assert_allclose(d["x"][0], images[1].reshape(-1) / 255.0, rtol=1e-6)


def test_bad_idx_files_are_reported(tmp_path):
    (tmp_path / "bad").write_bytes(b"\x12\x34\x08\x01\x00\x00\x00\x05")
    with pytest.raises(ValueError, match="bad magic"):
        mnist.read_idx(tmp_path / "bad")
    (tmp_path / "short").write_bytes(bytes([0, 0, 8, 1]) + np.asarray([10], ">u4").tobytes() + b"\x00\x01")
    with pytest.raises(ValueError, match="truncated IDX data"):
        mnist.read_idx(tmp_path / "short")
    with pytest.raises(ValueError, match="class 3 does not occur"):
        mnist.two_class(np.zeros((2, 4), np.uint8), np.array([1, 7]), (3, 7))
    with pytest.raises(FileNotFoundError):
        mnist.load_mnist_dir(tmp_path, split="test")


def test_elastic_augment_is_deterministic_bounded_and_close_to_the_source():
    rng = np.random.default_rng(1)
    src = np.zeros((3, 28, 28), np.float32)
    src[:, 8:20, 12:16] = 1.0
    src += rng.random(src.shape).astype(np.float32) * 0.05
    src = np.clip(src, 0, 1)
    a = mnist.elastic_augment(5, src, 6)
    b = mnist.elastic_augment(5, src, 6)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (6, 784) and a.min() >= 0 and a.max() <= 1
    flat = src.reshape(3, -1)
    for k in range(6):
        assert not np.allclose(a[k], flat[k % 3])
        assert np.corrcoef(a[k], flat[k % 3])[0, 1] > 0.5


def test_debian_fashion_mnist_if_installed():
    if not mnist.DEBIAN_FASHION_DIR.exists():
        pytest.skip("Debian's dataset-fashion-mnist is not installed (make data)")
    d = mnist.fashion_mnist_debian(split="test")
    assert d["x"].shape == (2000, 784) and abs(d["y"].mean() - 0.5) < 1e-9


def test_sklearn_digits_if_available():
    pytest.importorskip("sklearn")
    d = mnist.sklearn_digits()
    assert d["x"].shape[1] == 64 and 0.99 <= d["x"].max() <= 1.0 and set(d["y"].tolist()) == {0, 1}
