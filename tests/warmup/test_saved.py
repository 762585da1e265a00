"""The saved warm-up: data only (arrays + JSON, nothing unpickled or imported), restored only with the settings it was
found with, never from a corrupt file."""

import hashlib
import json
import os
import pickle
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from minibatch_mcmc.acceptance import penalty_test
from minibatch_mcmc.control_variates.taylor import TaylorProxy
from minibatch_mcmc.samplers.checkpoint import WARMUP_SETTINGS
from minibatch_mcmc.samplers.phase_cost import PhaseCost
from minibatch_mcmc.samplers.safe_files import CheckpointWriteError
from minibatch_mcmc.warmup.saved import WARMUP_ARRAYS, load_warmup, save_warmup


def test_round_trip_other_settings_and_corruption(tmp_path):
    settings = {"seed": [0, 1], "options": {"order": 2}}
    assert load_warmup(tmp_path, settings) is None
    save_warmup(tmp_path, settings, {"scale": 0.5, "covariance": np.eye(2)})
    back = load_warmup(tmp_path, settings)
    assert back["scale"] == 0.5 and np.array_equal(back["covariance"], np.eye(2))
    with pytest.raises(ValueError, match=r"other settings \(options.order: saved 2, this call 1\)"):
        load_warmup(tmp_path, {"seed": [0, 1], "options": {"order": 1}})
    (tmp_path / WARMUP_ARRAYS).write_bytes(b"not the arrays")
    with pytest.raises(ValueError, match="does not match the digest"):
        load_warmup(tmp_path, settings)


def test_library_objects_come_back_with_their_types_and_dtypes(tmp_path):
    """What a warm-up holds (NamedTuples of the library, JAX arrays of several dtypes, a weakly typed scalar, NumPy
    scalars, tuples beside lists, None) comes back equal and of the same type: a restored run then compiles and draws
    as the first did. Would catch a JAX array restored as NumPy, float32 widened, a tuple turned into a list."""
    proxy = TaylorProxy(
        centre={"w": jnp.asarray([0.5, -1.0], jnp.float32)},
        order=2,
        grad_sum=jnp.arange(2, dtype=jnp.float32),
        hess_sum=jnp.eye(2, dtype=jnp.float32),
        setup_data=1000,
    )
    payload = {
        "proxy": proxy,
        "test": penalty_test(),
        "idx": jnp.arange(3, dtype=jnp.int32),
        "weak": jnp.asarray(0.5),
        "acc": np.float64(0.25),
        "modes": (1, [2.0, None]),
        "cost": {"mode": PhaseCost(data=10, seconds=1.0, passes=0.5, compile_seconds=0.25)},
        "text": "proxy_hmc",
        "flag": True,
    }
    save_warmup(tmp_path, {}, payload)
    back = load_warmup(tmp_path, {})
    assert (
        type(back["proxy"]) is TaylorProxy
        and type(back["test"]) is type(payload["test"])
        and back["test"] == payload["test"]
    )
    for got, want in zip(jax.tree_util.tree_leaves(back), jax.tree_util.tree_leaves(payload)):
        assert type(got) is type(want), (got, want)
        if isinstance(want, jax.Array):
            assert (got.dtype, got.weak_type) == (want.dtype, want.weak_type)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert back["modes"] == (1, [2.0, None]) and back["cost"]["mode"] == payload["cost"]["mode"]


def test_a_warmup_in_the_previous_format_is_redone_not_read(tmp_path):
    """A format-2 warm-up (whose ``TaylorProxy`` had the fields ``centre_log_lik`` and ``n_data``, since removed) is
    ignored with a warning naming its format, so a resume redoes it. Would catch the old files being decoded (a
    ``TypeError`` on the removed fields, turned into a refusal) or skipped without a word."""
    save_warmup(tmp_path, {}, {"acc": np.float64(0.25)})
    record = json.loads((tmp_path / WARMUP_SETTINGS).read_text())
    (tmp_path / WARMUP_SETTINGS).write_text(json.dumps(record | {"format": 2}))
    with pytest.warns(UserWarning, match=r"earlier format \(2; this version reads 3\)"):
        assert load_warmup(tmp_path, {}) is None


def test_unsaveable_warmup_warns_and_writes_nothing(tmp_path):
    with pytest.warns(UserWarning, match="could not be saved"):
        assert save_warmup(tmp_path, {}, {"f": lambda: 0}) is None
    with pytest.warns(UserWarning, match=r"could not be saved .*\['f'\] is a .*Model.*cannot hold"):
        from minibatch_mcmc.models import gaussian_mean

        assert (
            save_warmup(tmp_path, {}, {"f": gaussian_mean()}) is None
        )  # a model is saved only as a reference given back
    assert load_warmup(tmp_path, {}) is None
    assert not os.listdir(tmp_path)


class _Marker:
    """An object whose unpickling runs ``os.system`` (what a crafted pickle can do)."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_a_crafted_pickle_is_never_unpickled(tmp_path):
    """Before: ``warmup.pkl`` was unpickled on resume, and its digest sat beside it, so a crafted file with its digest
    updated ran a shell command. Now the pickle is never read: the old-format warm-up is ignored with a warning."""
    marker = tmp_path / "marker"
    blob = pickle.dumps({"scale": _Marker(marker)})
    (tmp_path / "warmup.pkl").write_bytes(blob)
    (tmp_path / WARMUP_SETTINGS).write_text(json.dumps({"settings": {}, "sha256": hashlib.sha256(blob).hexdigest()}))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            out = load_warmup(tmp_path, {})
        except Exception:  # noqa: BLE001 - any failure is fine; running the payload is not
            out = None
    assert not marker.exists(), "the crafted pickle was executed"
    assert out is None and any("earlier format" in str(w.message) for w in seen)


@pytest.mark.parametrize("name", ["os.system", "subprocess.Popen", "builtins.eval", "minibatch_mcmc.models.base.Model"])
def test_a_crafted_tree_naming_another_class_is_refused(tmp_path, name):
    """A warm-up file naming a class outside the library's registry (one that would run a command if called) is refused
    without importing or calling it."""
    marker = tmp_path / "marker"
    save_warmup(tmp_path, {}, {"scale": 0.5})
    record = json.loads((tmp_path / WARMUP_SETTINGS).read_text())
    record["tree"] = {
        "dict": {"scale": {"namedtuple": name, "fields": {"command": f"touch {marker}", "args": f"touch {marker}"}}}
    }
    (tmp_path / WARMUP_SETTINGS).write_text(json.dumps(record))
    with pytest.raises(ValueError, match=rf"cannot be restored .*{name}.* not one of the classes"):
        load_warmup(tmp_path, {})
    assert not marker.exists()


def test_an_object_array_is_refused(tmp_path):
    """An ``.npz`` holding a pickled object array (its digest updated) is refused: arrays are read without pickle."""
    marker = tmp_path / "marker"
    save_warmup(tmp_path, {}, {"a": np.zeros(2)})
    np.savez(tmp_path / WARMUP_ARRAYS, a0=np.array([_Marker(marker)], dtype=object))
    record = json.loads((tmp_path / WARMUP_SETTINGS).read_text())
    record["sha256"] = hashlib.sha256((tmp_path / WARMUP_ARRAYS).read_bytes()).hexdigest()
    (tmp_path / WARMUP_SETTINGS).write_text(json.dumps(record))
    with pytest.raises(ValueError, match="cannot be restored .*allow_pickle"):
        load_warmup(tmp_path, {})
    assert not marker.exists()


def test_links_planted_at_temporary_names_are_never_followed(tmp_path):
    """Before: the warm-up was written to ``.warmup.pkl.tmp`` and ``.warmup.json.tmp``, following a link planted there
    (a file outside the directory was overwritten). Now every temporary is created exclusively under a fresh name."""
    outside = tmp_path / "outside"
    outside.mkdir()
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    names = [".warmup.pkl.tmp", ".warmup.json.tmp", ".warmup.npz.tmp", ".settings.json.tmp"]
    for name in names:
        (outside / name).write_text("precious")
        (ckpt / name).symlink_to(outside / name)
    save_warmup(ckpt, {"seed": 1}, {"scale": 0.5})
    assert all((outside / n).read_text() == "precious" for n in names)
    assert load_warmup(ckpt, {"seed": 1}) == {"scale": 0.5}


def test_a_full_disk_is_one_clear_error(tmp_path, monkeypatch):
    """ENOSPC while saving the warm-up: one ``CheckpointWriteError`` naming ENOSPC and the file; no temporary is left."""
    import errno

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(
        CheckpointWriteError, match=rf"could not write the saved warm-up {tmp_path}.*ENOSPC: the disk is full"
    ):
        save_warmup(tmp_path, {}, {"scale": 0.5})
    assert os.listdir(tmp_path) == []
