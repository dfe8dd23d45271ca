"""``Method`` is the maths of a method and nothing else: its contract is pinned here, so that
it cannot silently grow back. Where a parameter lives is its layout
(:func:`fedrec_flwr.methods.layout.layout`, computed from ``roles``); the fast paths a
method may offer are capabilities (:mod:`fedrec_flwr.methods.capabilities`); what is known
about a method besides its maths is its card; a plug-in's state and flags are the
plug-in's."""

import numpy as np

from fedrec_flwr.config import RunConfig
from fedrec_flwr.methods import PLGC, ROWS, Role, build_method
from fedrec_flwr.methods.capabilities import eval_chunk, linear_head, rowwise_logits, zero_threshold
from fedrec_flwr.methods.layout import layout
from fedrec_flwr.methods.plugin import method_members
from fedrec_lab.testing import user_params

#: Every public member of ``Method`` (through its bases), by what it is.
CONTRACT = {
    # its parameters and where each lives
    "name",
    "init_private",
    "init_dense",
    "roles",
    "row_dim",
    # its local update
    "stages",
    "phases",
    "learning_rate",
    "begin_local_update",
    "after_step",
    "end_local_update",
    "loss",
    "closed_form_grads",
    # its score function
    "logits",
    "logits_all",
    "represent",
    "score",
}


def test_the_method_contract_is_pinned():
    """A member added to ``Method`` (or one moved out and back) fails here: put it where it is
    read (the layout, the card, a plug-in, the runtime) or change the contract on purpose."""
    public = {name for name in method_members() if not name.startswith("_")}
    assert public == CONTRACT, (
        f"added: {sorted(public - CONTRACT)}; removed: {sorted(CONTRACT - public)}"
    )
    assert not {name for name in method_members() if name.startswith("_")}


def test_a_wrapped_method_offers_its_base_methods_capabilities():
    """What a method offers beside the contract is read through the wrapper (PLGC)."""
    for name in ("fedrap", "pfedrec"):
        config = RunConfig.from_mapping({"method": name, "plgc": True, "embedding-dim": 4})
        method = build_method(config, num_items=6)
        assert isinstance(method, PLGC)
        for offered in (rowwise_logits, eval_chunk, zero_threshold):
            assert offered(method) == offered(method.base), offered.__name__
        params = user_params(method.base, np.arange(2), np.random.default_rng(0))
        assert linear_head(method, params) is not None
    assert zero_threshold(build_method(config.replace(plgc=False), num_items=6)) is None
    assert eval_chunk(build_method(config.replace(method="fedncf", plgc=False), 6)) == 16


def test_the_layout_follows_the_roles_the_plugins_leave():
    """PFedRec's rows are personal as published; DualPer makes another method's rows personal
    and its dense parameters private; a plain method keeps shared rows."""

    def layout_of(**keys):
        config = RunConfig.from_mapping({"embedding-dim": 4, **keys})
        return layout(build_method(config, num_items=6))

    plain, native = layout_of(method="fedncf"), layout_of(method="pfedrec")
    dual = layout_of(method="fedncf", personalization="dual")
    assert not plain.personal_rows and plain.eval_table == "latest" and plain.shared_dense
    assert native.personal_rows and native.roles[ROWS] is Role.PERSONAL_ROWS
    assert dual.personal_rows and dual.eval_table == "round-start" and not dual.shared_dense
    assert set(plain.shared_dense) == set(dual.dense) <= set(dual.kept_private)
    persist = layout_of(**{"method": "pfedrec", "plgc": True, "plgc-persist": True})
    assert (
        persist.train_from_personal
        and not layout_of(method="pfedrec", plgc=True).train_from_personal
    )
