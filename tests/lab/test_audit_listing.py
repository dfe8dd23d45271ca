"""The privacy audit lists and imitates the methods that declare how (their cards' ``audit``)."""

from __future__ import annotations

import numpy as np
import pytest

from fedrec_flwr.config import RunConfig
from fedrec_flwr.methods import (
    AuditImitation,
    FedMF,
    MethodCard,
    methods,
    register_method,
    unregister_method,
)
from fedrec_flwr.methods.base import linear_head_init
from fedrec_flwr.privacy.ldp import LdpKeys
from fedrec_flwr.privacy.secagg import SecAggKeys
from fedrec_lab.audit.command import config_keys
from fedrec_lab.audit.report import markdown, user_epsilon
from fedrec_lab.audit.run import (
    ATTACKS,
    auditable_methods,
    audited_run,
    imitation_of,
    preset,
    shadow_of,
)


def test_the_audited_methods_are_those_that_declare_an_imitation():
    declared = [name for name, card in methods().items() if card.audit is not None]
    assert auditable_methods() == declared and declared
    assert [imitation_of(name) for name in declared] == [methods()[n].audit for n in declared]
    silent = next(name for name, card in methods().items() if card.audit is None)
    listed = ", ".join(declared)
    with pytest.raises(ValueError, match=f"the audit imitates {listed}, not '{silent}'"):
        imitation_of(silent)


def test_the_ldp_clip_is_the_methods():
    ldp = config_keys("ldp", "pfedrec", {}, {})
    assert ldp["ldp-clip"] == 15.0 and ldp["ldp-mechanism"] == "gaussian"
    assert config_keys("both", "fedmf", {"ldp-clip": 2.0}, {})["ldp-clip"] == 2.0
    assert config_keys("ldp", "fedmf", {}, {})["ldp-clip"] == 3.0


@pytest.mark.parametrize("method", auditable_methods())
def test_secure_aggregation_with_ldp_takes_both_and_ldps_settings(method):
    keys = config_keys("secagg-ldp", method, {}, {})
    assert keys == {**config_keys("secagg", method, {}, {}), **config_keys("ldp", method, {}, {})}
    assert config_keys("secagg-ldp", method, {"ldp-epsilon": 2.0}, {})["ldp-epsilon"] == 2.0
    config = RunConfig.from_mapping({**preset(method, "strict"), **keys})  # accepted
    secagg, ldp = config.group(SecAggKeys), config.group(LdpKeys)
    assert secagg.secure_aggregation and secagg.secure_aggregation_keys == "seeded"
    assert (ldp.ldp_mechanism, ldp.ldp_epsilon, ldp.ldp_delta) == ("gaussian", 4.0, 1e-5)
    assert ldp.ldp_clip == imitation_of(method).ldp_clip


@pytest.mark.usefixtures("private_cache")
def test_an_audited_run_under_secure_aggregation_with_ldp_reports_the_user_epsilon():
    keys = config_keys("secagg-ldp", "pfedrec", {}, {})
    mapping = {
        "method": "pfedrec",
        "dataset": "synthetic",
        "synthetic-users": 12,
        "synthetic-items": 60,
        "synthetic-mean-degree": 6,
        "num-server-rounds": 2,
        **keys,
    }
    result = audited_run(mapping, [1, 2], 3, 0)
    level = result["user_level"]
    assert level["delta"] == 1e-5 and 0 < level["epsilon-median"] <= level["epsilon-max"]
    assert result["attacks"]["uploads"] == 6  # 3 users' masked vectors in 2 rounds
    record = {"protocol": "strict", "method": "pfedrec", "config": "secagg-ldp", "seed": 0}
    record |= {"keys": keys, "dataset": "synthetic", "rounds": 2, "nodes": 0, "users": 3}
    record |= {"audit_rounds": [1, 2], **result}
    assert user_epsilon([record]) == f"{level['epsilon-median']:.3g} / {level['epsilon-max']:.3g}"
    assert "secure-aggregation=True" in markdown([record], ATTACKS, "c")


def test_a_shadow_starts_from_what_the_server_knows():
    pfedrec = RunConfig.from_fields(method="pfedrec", embedding_dim=4)
    shadow = shadow_of(pfedrec, 10, np.random.default_rng(0))
    head = linear_head_init(pfedrec, np.zeros(1, dtype=np.int64), 4)
    np.testing.assert_array_equal(shadow.weight, head["score-weight"][0].numpy())
    assert (shadow.kind, shadow.train_bias) == ("alternate", True)
    assert shadow.lr_rows == pfedrec.learning.item_learning_rate(10)
    fedmf = RunConfig.from_fields(method="fedmf", embedding_dim=4, init_std=0.5)
    shadow = shadow_of(fedmf, 10, np.random.default_rng(1))
    np.testing.assert_array_equal(shadow.weight, np.random.default_rng(1).normal(0.0, 0.5, 4))
    assert (shadow.kind, shadow.bias, shadow.train_bias) == ("joint", 0.0, False)


class AuditedMF(FedMF):
    name = "audited-mf"


AUDITED_MF = MethodCard(
    AuditedMF,
    title="Audited MF",
    paper="",
    audit=AuditImitation(update="joint", head="random", train_bias=False, ldp_clip=2.0),
)


def test_a_registered_method_with_an_imitation_joins_the_listing():
    register_method(AUDITED_MF)
    try:
        assert auditable_methods()[-1] == "audited-mf"
        assert config_keys("ldp", "audited-mf", {}, {})["ldp-clip"] == 2.0
    finally:
        unregister_method(AuditedMF.name)
    assert "audited-mf" not in auditable_methods()
