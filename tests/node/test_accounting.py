"""The user-level accountant of LDP (fedrec_flwr.privacy.accounting): Google's dp-accounting
on its own documented examples, the composition over rows and rounds on a hand example, the
summary's bound against exact counts, and the refusal of uploads LDP would not cover."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
from dp_accounting import dp_event, gaussian_mechanism
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import RunConfig
from fedrec_flwr.methods import build_method
from fedrec_flwr.methods.layout import layout
from fedrec_flwr.privacy import uploads
from fedrec_flwr.privacy.accounting import (
    RowCounter,
    row_noise_multiplier,
    run_rows_bound,
    summary_fields,
    user_level,
)
from fedrec_flwr.privacy.ldp import noise_scale
from fedrec_flwr.schema import ConfigError
from fedrec_flwr.server_app import run_federation
from fedrec_lab.local_grid import LocalGrid


def row_epsilon_for(z: float, row_delta: float) -> float:
    """The ``ldp-epsilon`` whose Gaussian calibration has noise multiplier ``z``."""
    return math.sqrt(2.0 * math.log(1.25 / row_delta)) / z


def gaussian_delta(epsilon: float, multiplier: float) -> float:
    """Exact delta of a Gaussian mechanism at ``epsilon`` (Balle and Wang 2018, Thm 8), by
    hand: ``Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)``, ``mu = 1/multiplier``."""
    mu = 1.0 / multiplier

    def phi(x: float) -> float:
        return 0.5 * math.erfc(-x / math.sqrt(2.0))

    return phi(-epsilon / mu + mu / 2) - math.exp(epsilon) * phi(-epsilon / mu - mu / 2)


# ---------------------------------------------------------------- the library's own examples
def test_gaussian_as_in_the_pld_accountants_basic_example():
    # dp-accounting's pld_privacy_accountant_test.test_gaussian_basic: noise multiplier
    # sqrt(3), composed 3 times, is (1, 0.126936)-DP.
    row_delta = 1e-5
    level = user_level("gaussian", row_epsilon_for(math.sqrt(3), row_delta), row_delta, 3, 0.126936)
    assert level.epsilon == pytest.approx(1.0, abs=1e-3)
    assert level.rows == 3 and level.delta == 0.126936


def test_gaussian_is_tighter_than_the_rdp_accountants_example():
    # rdp_privacy_accountant_test.test_compute_epsilon_delta_gaussian: by RDP, multiplier
    # 4.530877117 is (1, 1e-6)-DP. The exact (analytic) epsilon is below, as the PLD's.
    rdp = rdp_privacy_accountant.RdpAccountant(orders=[0.001 * i for i in range(1000, 100000)])
    rdp.compose(dp_event.GaussianDpEvent(4.530877117))
    assert rdp.get_epsilon(1e-6) == pytest.approx(1.0, abs=1e-6)
    row_delta = 1e-5
    level = user_level("gaussian", row_epsilon_for(4.530877117, row_delta), row_delta, 1, 1e-6)
    pld = pld_privacy_accountant.PLDAccountant()
    pld.compose(dp_event.GaussianDpEvent(4.530877117))
    assert level.epsilon < 1.0
    assert level.epsilon == pytest.approx(pld.get_epsilon(1e-6), abs=1e-3)


def test_laplace_as_in_the_pld_accountants_laplace_example():
    # pld_privacy_accountant_test.test_laplace_basic: Laplace events whose epsilons add up to
    # 4 are (4, 1e-14)-DP: basic composition.
    assert user_level("laplace", 1.0, 1e-5, 4, 1e-14).epsilon == pytest.approx(4.0)
    assert user_level("laplace", 0.5, 1e-5, 8, 1e-14).epsilon == pytest.approx(4.0)


@pytest.mark.parametrize("rows", [1, 30, 400])
def test_laplace_lies_between_the_exact_pld_and_basic_composition(rows):
    pld = pld_privacy_accountant.PLDAccountant()
    pld.compose(dp_event.LaplaceDpEvent(0.5), rows)  # epsilon 2 per row
    ours = user_level("laplace", 2.0, 1e-5, rows, 1e-5).epsilon
    assert pld.get_epsilon(1e-5) - 1e-6 <= ours <= 2.0 * rows + 1e-9


# ------------------------------------------------------------------- composition by hand
def test_the_noise_multiplier_is_the_ldp_calibration_over_the_sensitivity():
    clip, dim = 3.0, 16
    sigma = noise_scale("gaussian", 4.0, 1e-5, clip, dim)
    assert row_noise_multiplier("gaussian", 4.0, 1e-5) == pytest.approx(sigma / (2 * clip))
    b = noise_scale("laplace", 4.0, 1e-5, clip, dim)
    assert row_noise_multiplier("laplace", 4.0, 1e-5) == pytest.approx(b / (2 * clip * 4.0))


def test_rows_and_rounds_compose_as_one_gaussian_of_sensitivity_2c_sqrt_n():
    # A user uploads 4 rows a round for 25 rounds: its whole run is one vector of 100
    # clipped rows, L2 sensitivity 2C * 10, noise sigma per coordinate: one Gaussian of
    # multiplier z / 10.
    z, rows, delta = 2.0, 4 * 25, 1e-5
    level = user_level("gaussian", row_epsilon_for(z, 1e-5), 1e-5, rows, delta)
    assert gaussian_delta(level.epsilon, z / 10) == pytest.approx(delta, rel=1e-6)
    assert level.epsilon == pytest.approx(gaussian_mechanism.get_epsilon_gaussian(z / 10, delta))
    pld = pld_privacy_accountant.PLDAccountant()  # the library composing the 100 rows itself
    pld.compose(dp_event.GaussianDpEvent(z), rows)
    assert level.epsilon == pytest.approx(pld.get_epsilon(delta), rel=1e-2)


def test_more_rows_cost_more_epsilon():
    epsilons = [user_level("gaussian", 4.0, 1e-5, n, 1e-5).epsilon for n in (1, 10, 100, 1000)]
    assert epsilons == sorted(epsilons) and epsilons[-1] > 100 * epsilons[0] / 10
    assert user_level("gaussian", 4.0, 1e-5, 0, 1e-5).epsilon == 0.0


# ---------------------------------------------------------------- what the run reports
def test_the_bound_counts_every_row_of_each_round_with_training():
    rounds = [
        {"train-users": 5, "touched-items": 40},
        {"train-users": 0, "touched-items": 0},
        {"train-users": "3", "touched-items": "12"},
        {"train-users": "", "touched-items": ""},
    ]
    assert run_rows_bound(rounds) == 52


def test_summary_fields_without_ldp_are_empty_and_raw_laplace_has_no_epsilon():
    assert summary_fields(RunConfig.from_mapping({}), []) == {}
    raw = summary_fields(RunConfig.from_mapping({"ldp-laplace-lambda": 0.3}), [])
    assert raw["ldp_user_level"]["epsilon"] is None
    assert "without clipping" in raw["ldp_user_level"]["why"]


def test_row_counter_reports_the_median_and_worst_user():
    config = RunConfig.from_mapping({"ldp-mechanism": "gaussian", "ldp-epsilon": 4.0})
    counter = RowCounter()
    for user, rows in ((1, 10), (2, 30), (3, 20), (1, 15)):
        counter(user, 1, np.arange(rows), np.zeros((rows, 2)), np.zeros((rows, 2)))
    levels = counter.user_levels(config)
    assert (levels["rows-median"], levels["rows-max"]) == (25, 30)
    assert levels["epsilon-max"] == user_level("gaussian", 4.0, 1e-5, 30, 1e-5).epsilon
    assert RowCounter().user_levels(config) == {}


@pytest.mark.usefixtures("private_cache")
def test_summary_reports_a_bound_above_every_users_exact_epsilon(tmp_path: Path):
    run_config = {
        "dataset": "synthetic",
        "synthetic-users": 24,
        "synthetic-items": 300,
        "synthetic-mean-degree": 10,
        "num-server-rounds": 2,
        "batch-size": 32,
        "ldp-mechanism": "gaussian",
        "ldp-epsilon": 4.0,
        "results-dir": str(tmp_path),
        "run-name": "run",
    }
    counter = RowCounter()
    uploads.OBSERVERS.append(counter)
    try:
        summary = run_federation(
            LocalGrid(client_app, run_config, num_nodes=2), RunConfig.from_mapping(run_config)
        )
    finally:
        uploads.OBSERVERS.remove(counter)
    with open(tmp_path / "run" / "rounds.csv") as f:
        touched = sum(int(row["touched-items"]) for row in csv.DictReader(f))
    level = summary["ldp_user_level"]
    assert level["rows"] == touched >= max(counter.rows.values())
    assert level["per_row"] == {"mechanism": "gaussian", "epsilon": 4.0, "delta": 1e-5}
    worst = counter.user_levels(RunConfig.from_mapping(run_config))["epsilon-max"]
    assert level["epsilon"] >= worst > 4.0


# ------------------------------------------------------------- every shared parameter
@pytest.mark.parametrize("keys", [{"ldp-mechanism": "gaussian"}, {"ldp-laplace-lambda": 0.2}])
def test_ldp_is_refused_for_a_method_that_uploads_shared_dense_parameters(keys):
    with pytest.raises(ConfigError, match=r"mlp-0-weight.*LDP does not clip or noise"):
        build_method(RunConfig.from_mapping({"method": "fedncf", **keys}), 30)


def test_ldp_is_accepted_where_every_shared_parameter_is_a_row():
    for keys in ({"method": "fedncf", "personalization": "dual"}, {"method": "fedmf"}):
        config = RunConfig.from_mapping({**keys, "ldp-mechanism": "gaussian"})
        assert layout(build_method(config, 30)).shared_dense == ()
