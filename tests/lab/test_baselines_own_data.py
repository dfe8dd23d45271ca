"""The reference rows of a user's file (dataset = "file"): the same rows as the named loader."""

import json

import pandas as pd
import pytest

from fedrec_flwr.config import RunConfig
from fedrec_lab.baselines import local_only_config
from fedrec_lab.baselines.command import main

pytest.importorskip("scipy")  # the [baselines] extra (and [test]) installs it
pytestmark = pytest.mark.usefixtures("private_cache")


def test_ml100k_written_out_gets_the_named_datasets_rows(real_data_dir, tmp_path, capsys):
    raw = pd.read_csv(real_data_dir / "ml-100k" / "u.data", sep="\t", header=None)
    raw.columns = ["user", "movie", "rating", "time"]
    raw.to_csv(tmp_path / "ratings.csv", index=False)
    rows = ["--rows", "popularity", "ease"]
    main(["--dataset", "ml-100k", "--data-dir", str(real_data_dir), *rows, "--out", str(tmp_path)])
    own = ["--dataset", "file", "--data-file", str(tmp_path / "ratings.csv")]
    own += ["--user-column", "user", "--item-column", "movie", "--timestamp-column", "time"]
    main([*own, *rows, "--out", str(tmp_path)])
    named = json.loads((tmp_path / "baselines-ml-100k-strict.json").read_text())
    mine = json.loads((tmp_path / "baselines-file-ratings-strict.json").read_text())
    assert len(mine["data-file-sha256"]) == 64 and "--user-column user" in mine["command"]
    for a, b in zip(named["rows"], mine["rows"], strict=True):
        assert {**a, "seconds": 0} == {**b, "seconds": 0}
    assert "# Reference rows: file ratings.csv (sha256 " in capsys.readouterr().out


def test_a_bad_file_stops_the_command_with_its_message(tmp_path):
    (tmp_path / "x.csv").write_text("user_id,item_id\n1,2\n")
    with pytest.raises(SystemExit, match=r"x.csv: line 1 \(the header\) has no column 'ts'"):
        main(
            [
                "--dataset",
                "file",
                "--data-file",
                str(tmp_path / "x.csv"),
                "--timestamp-column",
                "ts",
            ]
        )
    with pytest.raises(SystemExit, match=r"x.csv: one user is left after filtering"):
        main(["--dataset", "file", "--data-file", str(tmp_path / "x.csv")])


def test_local_only_rows_read_the_same_file(tmp_path):
    config = RunConfig.from_mapping(
        {"dataset": "file", "data-file": str(tmp_path / "x.csv"), "user-column": "u", "k-core": 2}
    )
    local = local_only_config(config, "pfedrec", rounds=3)
    file = local.data.file
    assert (local.data.dataset, file.data_file, file.user_column, file.k_core) == (
        "file",
        str(tmp_path / "x.csv"),
        "u",
        2,
    )
    assert local.server.server_lr == 0.0 and local.training.num_server_rounds == 3


def test_a_generated_shape_is_set_on_the_command_line(tmp_path):
    shape = ["--synthetic-users", "60", "--synthetic-items", "80", "--synthetic-mean-degree", "8"]
    main(["--dataset", "synthetic", *shape, "--rows", "popularity", "--out", str(tmp_path)])
    written = json.loads((tmp_path / "baselines-synthetic-60x80-d8-strict.json").read_text())
    assert " ".join(shape) in written["command"]
    assert (written["num_users"], written["synthetic-items"]) == (60, 80)
    with pytest.raises(SystemExit, match="synthetic-items must be at least twice"):
        main(["--dataset", "synthetic", "--synthetic-items", "10", "--out", str(tmp_path)])
