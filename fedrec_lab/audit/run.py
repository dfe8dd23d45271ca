"""One audited run: a federation in-process whose sampled users' uploads are captured in
chosen rounds, then attacked (:mod:`fedrec_lab.audit.attacks`)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from fedrec_flwr.config import RunConfig
from fedrec_flwr.methods import methods
from fedrec_flwr.methods.base import linear_head_init
from fedrec_flwr.methods.card import AuditImitation
from fedrec_flwr.partition import participants
from fedrec_flwr.privacy import secagg, uploads
from fedrec_flwr.privacy.accounting import RowCounter
from fedrec_flwr.privacy.decoys import DecoyKeys, DecoyUpdates, user_decoys
from fedrec_flwr.privacy.secagg import SecAggKeys
from fedrec_flwr.run_keys import RunGroups
from fedrec_flwr.seeding import keyed_rng
from fedrec_lab.audit import adaptive, attacks, malicious_server
from fedrec_lab.presets import resolve
from fedrec_lab.project import conf_dir, lazy_paths

__getattr__ = lazy_paths(__name__, "PROJECT")  # the project folder, found when read
BASIC_ATTACKS = ("norm", "direction", "imia", "request")
#: Under secure aggregation also the malicious server (:mod:`.malicious_server`).
MALICIOUS_SERVER = "malicious-server"
ATTACKS = BASIC_ATTACKS + adaptive.ADAPTIVE_ATTACKS + (MALICIOUS_SERVER,)
#: Rounds the multi-round attacker accumulates (ending at the attacked one) and the
#: consistency attacker compares (on either side of it).
WINDOW = 3


def preset(method: str, protocol: str, dataset: str = "ml-100k") -> dict:
    """The method's preset ``conf/<method>-<dataset>-<protocol>.toml`` as a mapping."""
    short = dataset.replace("-", "")
    return resolve(conf_dir() / f"{method}-{short}-{protocol}.toml")


class Capture:
    """Observer keeping the uploads of ``users`` in ``rounds`` (items, uploaded, sent)."""

    def __init__(self, users: np.ndarray, rounds: set[int]) -> None:
        self.users, self.rounds = set(map(int, users)), rounds
        self.uploads: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def __call__(self, user, server_round, items, rows, sent) -> None:
        if user in self.users and server_round in self.rounds:
            self.uploads[(user, server_round)] = (items.copy(), rows.copy(), sent.copy())


class MaskedCapture(Capture):
    """Under secure aggregation: what the server sees of a user (its own node), every item
    as uploaded, the rows of its masked vector read as plain fixed point (under
    ``secure-aggregation-bound``, of the leader's share of its report), the full table
    sent (:data:`fedrec_flwr.privacy.secagg.OBSERVERS`); and what the malicious server
    recovers (:mod:`.malicious_server`): its deviations' refusals, and the plaintext rows
    when one passed."""

    def __init__(
        self, users: np.ndarray, rounds: set[int], config: RunGroups, num_users: int
    ) -> None:
        super().__init__(users, rounds)
        self.config, self.num_users = config, num_users
        self.refused: dict[tuple[int, int], dict[str, str | None]] = {}
        self.plain: dict[tuple[int, int], np.ndarray] = {}

    def wants(self, user: int, server_round: int) -> bool:
        return user in self.users and server_round in self.rounds

    def __call__(self, user, server_round, seen, table, plain) -> None:
        if self.wants(user, server_round):
            everything = np.arange(len(table), dtype=np.int64)
            sent = table.astype(np.float64)
            self.uploads[(user, server_round)] = (everything, seen, sent)
            refused = malicious_server.refusals(self.config, self.num_users, user, server_round)
            self.refused[(user, server_round)] = refused
            if any(why is None for why in refused.values()):
                self.plain[(user, server_round)] = plain


def auditable_methods() -> list[str]:
    """The registered methods whose local update the audit can imitate (their cards'
    ``audit``)."""
    return [name for name, card in methods().items() if card.audit is not None]


def imitation_of(method: str) -> AuditImitation:
    """How the audit imitates ``method`` (its card's ``audit``)."""
    card = methods().get(method)
    if card is None or card.audit is None:
        raise ValueError(
            f"the audit imitates {', '.join(auditable_methods())}, not '{method}' (a method "
            "joins by declaring audit=AuditImitation(...) on its card)"
        )
    return card.audit


def shadow_of(config: RunConfig, num_items: int, rng: np.random.Generator) -> attacks.Shadow:
    """The server's imitation of the method's local update (its ``audit`` declaration)."""
    imitation = imitation_of(config.method_name)
    lr_rows = config.learning.item_learning_rate(num_items)
    if imitation.head == "shared":
        head = linear_head_init(config, np.zeros(1, dtype=np.int64), config.learning.embedding_dim)
        weight = head["score-weight"][0].numpy()
        bias = float(head["score-bias"][0])
    else:
        weight = rng.normal(0.0, config.learning.init_std, size=config.learning.embedding_dim)
        bias = 0.0
    return attacks.Shadow(
        imitation.update,
        weight,
        bias,
        lr_rows,
        config.learning.lr,
        config.training.batch_size,
        train_bias=imitation.train_bias,
    )


def request_of(prepared, config: RunConfig, user: int, server_round: int) -> np.ndarray:
    """The rows ``user`` requests for ``server_round`` (its items and its decoys)."""
    from fedrec_flwr.node.samples import user_round_items

    if config.group(SecAggKeys).secure_aggregation:  # every node asks for the full table
        return np.arange(prepared.num_items, dtype=np.int64)
    items, _ = user_round_items(prepared, config, user, server_round)
    return uploads.with_decoys(prepared, config, user, np.unique(items))


def captured_rounds(audit_rounds: list[int], window: int) -> set[int]:
    """The audited rounds and the ``window - 1`` rounds before each (multi-round attacker)."""
    return {r - back for r in audit_rounds for back in range(window) if r - back >= 1}


def request_counts(prepared, config: RunConfig, server_round: int) -> np.ndarray:
    """How many of the round's participants request each item (the server's view)."""
    users = participants(
        config.training.seed, server_round, prepared.num_users, config.training.fraction_train
    )
    counts = np.zeros(prepared.num_items, dtype=np.int64)
    for user in users:
        counts[request_of(prepared, config, int(user), server_round)] += 1
    return counts


def adaptive_scores(
    capture: Capture, prepared, config: RunConfig, user: int, server_round: int, popular
) -> dict[str, np.ndarray]:
    """The scores of the attacks that know the defence (:mod:`.adaptive`) on one upload."""
    items, rows, sent = capture.uploads[(user, server_round)]
    rng = keyed_rng(config.training.seed, "audit", 2, user, server_round)
    positives = len(np.unique(prepared.train_positives(user)))
    decoys = len(user_decoys(prepared, config, user))
    label: dict[str, float] = {DecoyUpdates.NEGATIVES: 0.0, DecoyUpdates.POSITIVES: 1.0}
    roles = (positives, max(len(items) - positives - decoys, 0), decoys)
    last = config.training.num_server_rounds
    near = [r for r in range(server_round - WINDOW + 1, server_round + WINDOW) if 1 <= r <= last]
    history = [
        capture.uploads[(user, r)]
        for r in near
        if r <= server_round and (user, r) in capture.uploads
    ]
    others = [request_of(prepared, config, user, r) for r in near if r != server_round]
    return {
        "unchanged": adaptive.unchanged_scores(sent, rows),
        "popularity": adaptive.popularity_scores(items, popular(server_round)),
        "consistency": adaptive.consistency_scores(items, others),
        "distribution": adaptive.distribution_scores(
            sent,
            rows,
            shadow_of(config, prepared.num_items, rng),
            roles,
            label.get(config.group(DecoyKeys).decoy_updates),
            rng,
        ),
        "pubpara": adaptive.pubpara_scores(sent, rows, positives),
        "multi-round": adaptive.multiround_scores(items, history),
    }


def attack_all(
    capture: Capture, prepared, config: RunConfig, audit_rounds: list[int] | None = None
) -> dict:
    """Mean AUC and F1 of every attack over the captured uploads of ``audit_rounds`` (None:
    all), the random-guess F1, and the norms of the real rows' changes (median, 90th
    percentile)."""
    results: dict[str, dict[str, list[float]]] = {name: {"auc": [], "f1": []} for name in ATTACKS}
    random_f1, norms = [], []
    counts_of: dict[int, np.ndarray] = {}

    def popular(server_round: int) -> np.ndarray:
        if server_round not in counts_of:
            counts_of[server_round] = request_counts(prepared, config, server_round)
        return counts_of[server_round]

    audited = sorted(
        key for key in capture.uploads if audit_rounds is None or key[1] in audit_rounds
    )
    for user, server_round in audited:
        items, rows, sent = capture.uploads[(user, server_round)]
        rng = keyed_rng(config.training.seed, "audit", 1, user, server_round)
        positive = np.isin(items, prepared.train_positives(user))
        count = int(positive.sum())
        decoy = np.isin(items, user_decoys(prepared, config, user))
        norms.extend(np.linalg.norm(rows[~decoy].astype(np.float64) - sent[~decoy], axis=1))
        shadow = shadow_of(config, prepared.num_items, rng)
        other = (
            server_round + 1
            if server_round < config.training.num_server_rounds
            else server_round - 1
        )
        scores = {
            "norm": attacks.norm_scores(sent, rows, shadow, count / len(items), rng),
            "direction": attacks.direction_scores(sent, rows),
            "imia": attacks.imia_scores(sent, rows, shadow, count, rng),
            "request": attacks.request_scores(items, request_of(prepared, config, user, other)),
        }
        scores.update(adaptive_scores(capture, prepared, config, user, server_round, popular))
        if isinstance(capture, MaskedCapture):
            key = (user, server_round)
            scores[MALICIOUS_SERVER] = malicious_server.scores(
                capture.refused[key], sent, capture.plain.get(key), rng
            )
        for name, score in scores.items():
            results[name]["auc"].append(attacks.auc(score, positive))
            results[name]["f1"].append(attacks.top_f1(score, positive, count, rng))
        random_f1.append(attacks.random_f1(len(items), count, count))
    out: dict[str, Any] = {  # the malicious server attacks under secure aggregation only
        name: {k: float(np.nanmean(v)) for k, v in values.items()}
        for name, values in results.items()
        if values["auc"] or name != MALICIOUS_SERVER
    }
    out["random-f1"] = float(np.mean(random_f1))
    out["uploads"] = len(audited)
    out["change-norm-median"] = float(np.median(norms))
    out["change-norm-p90"] = float(np.quantile(norms, 0.9))
    return out


def audited_run(
    mapping: dict,
    audit_rounds: list[int],
    num_users: int,
    num_nodes: int,
    prepared_dir: str = "",
) -> dict:
    """Run the configured federation, capturing ``num_users`` users (seeded) in
    ``audit_rounds``; return the test metrics of the best validation round and the attacks'
    figures. ``num_nodes`` > 0: Flower's ServerApp and ClientApp in-process (a temporary
    results folder); 0: the plain loop (:mod:`fedrec_lab.audit.loop`, no Flower) on the
    prepared split in ``prepared_dir`` (or the configured one)."""
    from fedrec_flwr.data.prepared import PreparedData, prepare

    with tempfile.TemporaryDirectory() as tmp:
        config = RunConfig.from_mapping(
            {**mapping, "results-dir": os.path.join(tmp, "results"), "checkpoint-every": 0}
        )
        prepared = PreparedData(Path(prepared_dir)) if prepared_dir else prepare(config)
        users = np.sort(
            keyed_rng(config.training.seed, "audit", 0).choice(
                prepared.num_users, size=min(num_users, prepared.num_users), replace=False
            )
        )
        secure = config.group(SecAggKeys).secure_aggregation  # the server sees masked vectors
        rounds = captured_rounds(audit_rounds, WINDOW)
        capture = (
            MaskedCapture(users, rounds, config, prepared.num_users)
            if secure
            else Capture(users, rounds)
        )
        counter = RowCounter()  # every user's uploaded rows: its user-level epsilon
        seen = secagg.OBSERVERS if secure else uploads.OBSERVERS
        seen.append(capture)
        uploads.OBSERVERS.append(counter)
        try:
            if num_nodes:
                from fedrec_flwr.client_app import app
                from fedrec_flwr.server_app import run_federation
                from fedrec_lab.local_grid import LocalGrid

                grid = LocalGrid(app, config.to_mapping(), num_nodes=num_nodes)
                summary = run_federation(grid, config)
            else:
                from fedrec_lab.audit.loop import run_plain

                summary = run_plain(config, prepared)
        finally:
            seen.remove(capture)
            uploads.OBSERVERS.remove(counter)
    return {
        "best_round": summary["best_round"],
        "test": summary["test"],
        "attacks": attack_all(capture, prepared, config, audit_rounds),
        "user_level": counter.user_levels(config),
        **exposure(summary),
    }


def exposure(summary: dict) -> dict:
    """Under a malicious attack (the plain loop's history): ``exposure``, the target's
    ER@10 at the best validation round, its largest over the evaluated rounds and each
    evaluated round's; nothing otherwise."""
    rounds = {
        int(row["round"]): float(row["target-er@10"])
        for row in summary.get("history", [])
        if "target-er@10" in row
    }
    if not rounds:
        return {}
    best = rounds[summary["best_round"]]
    return {"exposure": {"best": best, "max": max(rounds.values()), "rounds": rounds}}
