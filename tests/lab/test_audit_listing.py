"""The privacy audit lists and imitates the methods that declare how (``Method.audit``)."""

from __future__ import annotations

import numpy as np
import pytest

from fedrec_flwr.config import RunConfig
from fedrec_flwr.methods import METHODS, FedMF, register_method, unregister_method
from fedrec_flwr.methods.base import linear_head_init
from fedrec_flwr.methods.declarations import AuditImitation
from fedrec_lab.audit.command import config_keys
from fedrec_lab.audit.run import auditable_methods, imitation_of, shadow_of


def test_the_audited_methods_are_those_that_declare_an_imitation():
    assert auditable_methods() == ["pfedrec", "fedmf"]
    assert all(METHODS[name].audit is None for name in METHODS if name not in ("pfedrec", "fedmf"))
    with pytest.raises(ValueError, match="the audit imitates pfedrec, fedmf, not 'fedrecon'"):
        imitation_of("fedrecon")


def test_the_ldp_clip_is_the_methods():
    ldp = config_keys("ldp", "pfedrec", {}, {})
    assert ldp["ldp-clip"] == 15.0 and ldp["ldp-mechanism"] == "gaussian"
    assert config_keys("both", "fedmf", {"ldp-clip": 2.0}, {})["ldp-clip"] == 2.0
    assert config_keys("ldp", "fedmf", {}, {})["ldp-clip"] == 3.0


def test_a_shadow_starts_from_what_the_server_knows():
    pfedrec = RunConfig(method="pfedrec", embedding_dim=4)
    shadow = shadow_of(pfedrec, 10, np.random.default_rng(0))
    head = linear_head_init(pfedrec, np.zeros(1, dtype=np.int64), 4)
    np.testing.assert_array_equal(shadow.weight, head["score-weight"][0].numpy())
    assert (shadow.kind, shadow.train_bias) == ("alternate", True)
    assert shadow.lr_rows == pfedrec.item_learning_rate(10)
    fedmf = RunConfig(method="fedmf", embedding_dim=4, init_std=0.5)
    shadow = shadow_of(fedmf, 10, np.random.default_rng(1))
    np.testing.assert_array_equal(shadow.weight, np.random.default_rng(1).normal(0.0, 0.5, 4))
    assert (shadow.kind, shadow.bias, shadow.train_bias) == ("joint", 0.0, False)


class AuditedMF(FedMF):
    name = "audited-mf"
    audit = AuditImitation(update="joint", head="random", train_bias=False, ldp_clip=2.0)


def test_a_registered_method_with_an_imitation_joins_the_listing():
    register_method(AuditedMF)
    try:
        assert auditable_methods()[-1] == "audited-mf"
        assert config_keys("ldp", "audited-mf", {}, {})["ldp-clip"] == 2.0
    finally:
        unregister_method(AuditedMF.name)
    assert "audited-mf" not in auditable_methods()
