"""Results files: the payload records provenance and figures; tables refuse ragged rows."""

import json
from typing import NamedTuple

import numpy as np
import pytest

from reproductions.results import command_line, results_payload, table, write_results


class Cfg(NamedTuple):
    n: int
    grid: tuple


def test_payload_has_provenance_and_round_trips(tmp_path):
    """The file holds command, machine, versions, date, the config as JSON and the tables/values given."""
    tab = table(["method", "mean"], [["MHminibatch", "168.1"]])
    payload = results_payload(
        "gmm",
        command_line("gmm", ["--trials", "3"]),
        config=Cfg(10, (np.float32(0.5), 2)),
        tables={"gmm_table1": tab},
        values={"gmm.ratio": 51},
    )
    paths = write_results(tmp_path / "run", payload, copy_to=tmp_path / "docs" / "gmm.json")
    assert [p.name for p in paths] == ["results.json", "gmm.json"]
    back = json.loads(paths[1].read_text())
    assert back["command"] == "minibatch-mcmc reproduce gmm --trials 3"
    assert back["config"] == {"n": 10, "grid": [0.5, 2]}
    assert back["tables"]["gmm_table1"]["rows"] == [["MHminibatch", "168.1"]]
    assert back["values"] == {"gmm.ratio": "51"}
    assert {"machine", "versions", "date", "load_average"} <= back.keys()


def test_ragged_row_is_refused_naming_it():
    """A row with the wrong number of cells is an error naming the row and the columns."""
    with pytest.raises(ValueError, match=r"row 1 has 1 cells, expected 2"):
        table(["a", "b"], [["1", "2"], ["3"]])
