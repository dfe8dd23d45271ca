"""``Method`` is the maths of a method and nothing else: its contract is pinned here, so that
it cannot silently grow back. Where a parameter lives is its layout
(:func:`fedrec_flwr.methods.layout.layout`, computed from ``roles``); what is known about a
method besides its maths is its card; a plug-in's state and flags are the plug-in's."""

from fedrec_flwr.methods.plugin import method_members

#: Every public member of ``Method`` (through its bases), by what it is.
CONTRACT = {
    # its parameters and where each lives
    "name",
    "init_private",
    "init_private_from",
    "init_dense",
    "roles",
    "row_dim",
    "private_rows_in",
    "private_rows_out",
    # its local update
    "stages",
    "phases",
    "learning_rate",
    "begin_round",
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
    "linear_head",
    "rowwise_logits",
    "eval_chunk",
    # flags
    "zero_threshold",
}


def test_the_method_contract_is_pinned():
    """A member added to ``Method`` (or one moved out and back) fails here: put it where it is
    read (the layout, the card, a plug-in, the runtime) or change the contract on purpose."""
    public = {name for name in method_members() if not name.startswith("_")}
    assert public == CONTRACT, (
        f"added: {sorted(public - CONTRACT)}; removed: {sorted(CONTRACT - public)}"
    )
    assert not {name for name in method_members() if name.startswith("_")}
