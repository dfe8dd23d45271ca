"""``train-negatives = "non-train"``: training negatives from every item that is not a train
positive, held-out items included (FedRecGEL's reference code), under either protocol."""

import numpy as np
import pytest

from fedrec_flwr.config import ConfigError, RunConfig
from fedrec_flwr.data.prepared import prepare
from fedrec_flwr.node.samples import user_round_items, users_round_items


def synthetic(protocol: str, **keys):
    config = RunConfig.from_mapping(
        {
            "dataset": "synthetic",
            "protocol": protocol,
            "synthetic-users": 30,
            "synthetic-items": 40,  # few items: the held-out ones are often drawn
            "synthetic-mean-degree": 8,
            "num-negatives": 4,
            **keys,
        }
    )
    return config, prepare(config)


def negatives(prepared, config, users, server_round):
    drawn = users_round_items(prepared, config, users, server_round)
    return [items[labels == 0] for items, labels in drawn]


def test_non_train_negatives_reach_held_out_items_never_train_positives():
    config, prepared = synthetic("paper", **{"train-negatives": "non-train"})
    protocol_config = config.replace(train_negatives="protocol")
    users = np.arange(prepared.num_users)
    held_out_drawn = {"non-train": 0, "protocol": 0}
    for server_round in (1, 2, 3):
        for name, cfg in (("non-train", config), ("protocol", protocol_config)):
            drawn_by_user = negatives(prepared, cfg, users, server_round)
            for user, drawn in zip(users, drawn_by_user, strict=True):
                held_out = [prepared.valid_item[user], prepared.test_item[user]]
                train = prepared.train_positives(int(user))
                assert not np.isin(drawn, train).any()
                held_out_drawn[name] += int(np.isin(drawn, held_out).sum())
    assert held_out_drawn["protocol"] == 0  # the paper protocol's own rule
    assert held_out_drawn["non-train"] > 0


def test_non_train_batched_draws_are_the_per_user_draws():
    config, prepared = synthetic("paper", **{"train-negatives": "non-train"})
    users = np.random.default_rng(2).permutation(prepared.num_users)[:20]
    for server_round in (1, 4):
        batched = users_round_items(prepared, config, users, server_round)
        for user, (items, labels) in zip(users, batched, strict=True):
            want_items, want_labels = user_round_items(prepared, config, int(user), server_round)
            assert np.array_equal(items, want_items) and np.array_equal(labels, want_labels)


def test_non_train_is_the_strict_protocols_own_rule():
    config, prepared = synthetic("strict", **{"train-negatives": "non-train"})
    users = np.arange(prepared.num_users)
    same = config.replace(train_negatives="protocol")
    for left, right in zip(
        users_round_items(prepared, config, users, 2),
        users_round_items(prepared, same, users, 2),
        strict=True,
    ):
        assert np.array_equal(left[0], right[0])


def test_train_negatives_is_checked():
    with pytest.raises(ConfigError, match="non-train"):
        RunConfig.from_mapping({"train-negatives": "unseen"})
