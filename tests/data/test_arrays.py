import numpy as np
import pytest

from minibatch_mcmc.data import as_data_source, validate_data


def test_validate_accepts_pytrees_and_returns_n():
    assert validate_data({"x": np.zeros((5, 3)), "y": np.ones(5)}) == 5
    assert as_data_source(np.zeros(4)).n == 4


@pytest.mark.parametrize(
    "data, message",
    [
        ({"x": np.zeros((5, 3)), "y": np.ones(4)}, "disagree on N"),
        (np.array([0.0, np.nan, 1.0]), "non-finite value nan at index \\(1,\\)"),
        (np.array([0.0, np.inf]), "non-finite value inf"),
        (np.array(3.0), "scalar"),
        (np.array(["a", "b"]), "dtype"),
        (np.zeros((0, 2)), "N=0"),
        ({}, "empty"),
    ],
)
def test_validate_rejects_bad_data(data, message):
    with pytest.raises(ValueError, match=message):
        validate_data(data)


def test_pandas_frame_becomes_columns():
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"x": np.arange(5.0), "y": np.arange(5) % 2})
    source = as_data_source(frame)
    assert source.n == 5 and sorted(source.arrays()) == ["x", "y"]
    np.testing.assert_array_equal(source.arrays()["y"], frame["y"].to_numpy())
    np.testing.assert_array_equal(as_data_source(frame["x"]).arrays(), frame["x"].to_numpy())
    with pytest.raises(ValueError, match=r"data leaf \['g'\] has dtype object"):
        as_data_source(pd.DataFrame({"g": ["a", "b"]}))


def test_distinct_rows_of_a_repeated_population():
    """Rows repeated 1, 3 and 2 times (positions 0 | 1 2 3 | 4 5): one position of each row (its last), its copies, and
    every position mapped back to its row; any other population is its own positions, once each. A position mapped
    to a neighbouring row would weight a full read's term by the wrong copies."""
    from minibatch_mcmc.data.arrays import RowsRepeated, distinct_rows

    rows = distinct_rows(RowsRepeated({"x": np.zeros(3)}, np.array([1, 4, 6])), 6)
    np.testing.assert_array_equal(rows.position, [0, 3, 5])
    np.testing.assert_array_equal(rows.copies, [1.0, 3.0, 2.0])
    np.testing.assert_array_equal(rows.of(np.arange(6)), [0, 1, 1, 1, 2, 2])
    plain = distinct_rows({"x": np.zeros(4)}, 4)
    np.testing.assert_array_equal(plain.position, np.arange(4))
    np.testing.assert_array_equal(plain.copies, np.ones(4))
    np.testing.assert_array_equal(plain.of(np.array([3, 1])), [3, 1])
