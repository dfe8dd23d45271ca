"""The federation's round loop without Flower (one node holding every user), for the audit
where Flower is not installed.

The server update is the strategy's own (:meth:`fedrec_flwr.server.model.ServerModel.apply`),
every draw is keyed by (seed, user, round) and a packed node uploads the exact sum of its
users' uploads, so this loop gives the metrics of a Flower run of the same configuration
(``tests/lab/test_privacy_loop.py`` holds them equal); it supports what the audit runs: all
users every round, no early stopping, no checkpoints, every user evaluated.
"""

from __future__ import annotations

import numpy as np

from fedrec_flwr.aggregation import RowUpload
from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import PreparedData
from fedrec_flwr.node.runtime import NodeRuntime
from fedrec_flwr.partition import participants
from fedrec_flwr.privacy import secagg
from fedrec_flwr.privacy.bounded.encoding import clipped_sum
from fedrec_flwr.privacy.bounded.keys import round_bounds
from fedrec_flwr.privacy.secagg import SecAggKeys
from fedrec_flwr.server.model import ServerModel
from fedrec_flwr.stages import NodeUpload, SecureSum, Upload, UserChanges


def run_plain(config: RunConfig, prepared: PreparedData) -> dict:
    """Run the configured federation; return ``best_round``, its ``val`` and ``test``
    metrics (best validation HR@10, earliest on ties) and every evaluated round's means
    (under a malicious attack also its target's exposure ``target-er@10``)."""
    if config.evaluation.early_stopping_patience or config.evaluation.eval_users:
        raise ValueError("the plain loop runs without early stopping and evaluates every user")
    runtime = NodeRuntime(config, prepared, 0, 1)
    state = runtime.initial_state()
    model = ServerModel.initial(config, runtime.method, prepared.num_items)
    if config.group(SecAggKeys).secure_aggregation:  # the table holds what a user can encode
        model.value_limit = secagg.value_limit(prepared.num_users)
    history = []
    for server_round in range(1, config.training.num_server_rounds + 1):
        users = participants(
            config.training.seed, server_round, prepared.num_users, config.training.fraction_train
        )
        runtime.train_request(server_round)
        model.start_round()
        result, state = runtime.train(state, server_round, users, None, model.table, model.dense)
        upload: Upload = RowUpload(
            result.item_ids,
            result.row_sums,
            result.row_counts,
            result.num_users,
            result.dense_sums,
            result.zero_ids,
            result.zero_counts,
        )
        if result.secure is not None:  # one node: its vector is the round's sum, unmasked
            masked = SecureSum(server_round, result.secure, result.num_users, prepared.num_users)
            decoded = model.decode([NodeUpload(0, masked, {})])
            if not decoded:
                raise RuntimeError(f"round {server_round}: the secure sum did not decode (logged)")
            upload = decoded[0].upload
        if result.user_changes is not None:  # the verified reports' exact sum
            upload = _bounded_sum(config, result.user_changes, model.table, server_round)
        model.apply([upload])
        last = server_round == config.training.num_server_rounds
        if server_round % config.evaluation.eval_every and not last:
            continue
        sums = runtime.evaluate(state, None, model.evaluation_table(), model.dense)
        users_evaluated = sums.pop("num-users")
        means = {k: v / users_evaluated for k, v in sums.items() if k.startswith(("val", "test"))}
        if "target-exposed" in sums:  # a malicious attack's target: its exposure ER@10
            means["target-er@10"] = sums["target-exposed"] / users_evaluated
        history.append({"round": server_round, **means})
    best = max(history, key=lambda row: (row["val-hr@10"], -row["round"]))
    split = {
        s: {k[len(s) + 1 :]: v for k, v in best.items() if k.startswith(s)} for s in ("val", "test")
    }
    return {"best_round": best["round"], **split, "history": history}


def _bounded_sum(config: RunConfig, changes: UserChanges, table, server_round: int) -> RowUpload:
    """The users' proven changes summed, as the server's sum of their verified reports
    (:func:`~fedrec_flwr.privacy.bounded.encoding.clipped_sum`), one upload."""
    bounds = round_bounds(config, np.asarray(table))
    total, counts = clipped_sum(
        bounds, changes.users, changes.blocks, config.training.seed, server_round
    )
    touched = np.flatnonzero(counts)
    sums = total[touched] * 2.0**-bounds.frac_bits
    sums += counts[touched, None] * np.asarray(table, np.float64)[touched]
    return RowUpload(touched, sums, counts[touched], len(changes.users))
