"""What one client of the item-item method sends, receives and computes, and what the server
computes, measured on the method's own code with one user per node (the faithful mode's
messages, without Flower's transport).

Per client (medians over a seeded sample of users): the bytes of its train reply (plain:
its item lists; secure: the masked vector; as the ClientApp packs them), of what it downloads
(the train message: the peers' public keys under secure aggregation; the evaluate message:
the model's full table), and its CPU seconds: building its upload, masking it (a self-mask
and one pairwise mask towards each of its neighbours on the round's graph, SecAgg+'s
logarithmic degree, with its self-mask seed's shares sealed for them:
:func:`~fedrec_flwr.privacy.secagg_dropout.mask_round`), and scoring its own history.
Server: the CPU seconds of the model from the round's sums.

    python bench/itemitem_cost.py --data-dir DIR --presets itemitem-ease-ml100k-strict \\
        itemitem-ease-secure-ml100k-strict --write bench/results/itemitem-cost

Writes ``<write>.json`` and ``<write>.md``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import prepare
from fedrec_flwr.messages import array_record
from fedrec_flwr.methods.itemitem import ItemItemKeys
from fedrec_flwr.node.runtime import NodeRuntime
from fedrec_flwr.privacy import secagg, secagg_dropout
from fedrec_flwr.privacy.secagg import SecAggKeys
from fedrec_flwr.privacy.secagg_trust import SIGNATURE_BYTES
from fedrec_flwr.seeding import keyed_rng
from fedrec_flwr.server.handshake import IDENTITY_BYTES
from fedrec_flwr.server.statistics import StatisticsModel, StatisticsUpload
from fedrec_lab.presets import resolve
from fedrec_lab.project import conf_dir

SAMPLE = 30  # users measured per preset (seeded)


def cpu(function):
    """(result, CPU seconds of this process) of ``function()``."""
    started = time.process_time()
    result = function()
    return result, time.process_time() - started


def upload_of(node: NodeRuntime, server_round: int, support):
    """The node's train result of ``server_round`` (its users' upload)."""
    state = node.initial_state()
    return node.train(state, server_round, node.users, None, np.zeros((0, 0)), support=support)[0]


def measure(preset: str, data_dir: str) -> dict:
    mapping = {**resolve(conf_dir() / f"{preset}.toml"), "data-dir": data_dir}
    config = RunConfig.from_mapping(mapping)
    prepared = prepare(config)
    users = np.sort(keyed_rng(0, "audit").permutation(prepared.num_users)[:SAMPLE])
    secure = config.group(SecAggKeys).secure_aggregation
    rounds = 2 if secure and config.group(ItemItemKeys).itemitem_min_count > 1 else 1
    model = StatisticsModel(config, NodeRuntime(config, prepared, 0, 1).method, prepared.num_items)
    support = None
    if rounds == 2:  # the support the first round fixes (from the exact counts)
        counts = np.zeros(prepared.num_items)
        for user in range(prepared.num_users):
            counts[np.unique(prepared.train_positives(user))] += 1
        support = np.flatnonzero(counts >= config.group(ItemItemKeys).itemitem_min_count)
    up, build, score = [], [], []
    mask_seconds, vector_bytes = 0.0, 0
    k = secagg_dropout.degree(
        prepared.num_users, config.group(SecAggKeys).secure_aggregation_neighbours
    )
    key = secagg.private_key(0, 0, "seeded")
    near = {p: secagg.public_bytes(secagg.private_key(0, p, "seeded")) for p in range(1, k + 1)}
    for user in users.tolist():
        node = NodeRuntime(config, prepared, user, prepared.num_users)  # one user per node
        reply = 0
        for server_round in range(1, rounds + 1):
            result, seconds = cpu(lambda n=node, r=server_round: upload_of(n, r, support))
            build.append(seconds)
            if secure:
                (_, sealed, _), masked = cpu(
                    lambda v=result.secure: secagg_dropout.mask_round(
                        v, key, 0, near, bytes(32), secagg_dropout.threshold(k)
                    )
                )
                mask_seconds = max(mask_seconds, masked)
                vector_bytes = max(vector_bytes, result.secure.nbytes)
                packed = array_record(secure=result.secure, secagg_shares=sealed)
                reply += packed.count_bytes()
            else:
                reply += array_record(result.statistics).count_bytes()
        up.append(reply)
        history = node.initial_state().private
        table = torch.zeros((prepared.num_items, prepared.num_items))
        _, seconds = cpu(lambda m=node.method, h=history, t=table: m.logits_all(h, t))
        score.append(seconds)
    baskets = [model.method.uploaded_items(prepared, u) for u in range(prepared.num_users)]
    upload = StatisticsUpload(
        prepared.num_users,
        np.concatenate(baskets),
        np.r_[0, np.cumsum([len(b) for b in baskets])].astype(np.int64),
    )
    if support is not None:  # the counts round's release, as a two-round run holds it
        model.counts, model.support = counts, support
    model.start_round()
    _, server_seconds = cpu(lambda: model.apply([upload]))
    table_bytes = array_record(item_rows=model.table).count_bytes()
    return {
        "preset": preset,
        "users": prepared.num_users,
        "items": prepared.num_items,
        "rounds": rounds,
        "secure": secure,
        "support": None if support is None else len(support),
        "up_bytes_median": float(np.median(up)),
        "up_bytes_max": int(np.max(up)),
        "down_train_bytes": peers_bytes(prepared.num_users, k) if secure else 0,
        "down_eval_bytes": table_bytes,
        "upload_cpu_s_median": float(np.median(build)),
        "mask_cpu_s": mask_seconds,
        "neighbours": k if secure else 0,
        "score_cpu_s_median": float(np.median(score)),
        "server_model_cpu_s": server_seconds,
    }


def peers_bytes(users: int, k: int) -> int:
    """Bytes of a train message's secure-aggregation arrays (one user per node): the
    cohort's partition ids, and the node and its ``k`` neighbours' ids, public keys, the
    keys' signatures and identity keys (:meth:`SecureRounds.peers`)."""
    listed = k + 1
    return array_record(
        secagg_cohort=np.zeros(users, np.int64),
        secagg_peers=np.zeros(listed, np.int64),
        secagg_keys=np.zeros((listed, secagg.KEY_BYTES), np.uint8),
        secagg_signatures=np.zeros((listed, SIGNATURE_BYTES), np.uint8),
        secagg_identities=np.zeros((listed, IDENTITY_BYTES), np.uint8),
    ).count_bytes()


def markdown(command: str, rows: list[dict]) -> str:
    head = (
        "| preset | users x items | rounds | up (median / max) | down: train, eval | upload CPU s "
        "| masking CPU s (neighbours) | scoring CPU s | server model CPU s |"
    )
    lines = [
        "# Item-item: bytes and CPU seconds per client",
        "",
        f"```bash\n{command}\n```",
        "",
        head,
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        masks = f"{r['mask_cpu_s']:.4f} ({r['neighbours']})" if r["secure"] else "-"
        lines.append(
            f"| {r['preset']} | {r['users']:,} x {r['items']:,} | {r['rounds']} "
            f"| {mb(r['up_bytes_median'])} / {mb(r['up_bytes_max'])} "
            f"| {mb(r['down_train_bytes'])}, {mb(r['down_eval_bytes'])} "
            f"| {r['upload_cpu_s_median']:.4f} | {masks} | {r['score_cpu_s_median']:.4f} "
            f"| {r['server_model_cpu_s']:.1f} |"
        )
    lines += [
        "",
        f"Per client: medians over {SAMPLE} users (seeded), one user per node, the reply "
        "records as the ClientApp packs them. Down, eval: the evaluate message's table (the "
        "whole model, every client's download); down, train: the round's cohort and its "
        "neighbours' public keys, signatures and identity keys. "
        "Secure: the vector is the same length for every client; a client adds its "
        "self-mask and one pairwise mask per neighbour on the round's graph (the reply "
        "holds the self-mask seed's shares sealed for them; the largest of the users' "
        "masking times). CPU seconds "
        "of this process, measured on a shared machine: ratios between rows hold, absolute "
        "values vary.",
        "",
    ]
    return "\n".join(lines)


def mb(value: float) -> str:
    return f"{value / 1e6:.3g} MB" if value >= 1e5 else f"{value / 1e3:.3g} kB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--presets", nargs="+", required=True)
    parser.add_argument("--write", required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [measure(preset, args.data_dir) for preset in args.presets]
    command = (
        f"python bench/itemitem_cost.py --data-dir DIR --presets {' '.join(args.presets)} "
        f"--write {args.write}"
    )
    out = Path(args.write)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"command": command, "rows": rows}, indent=2))
    out.with_suffix(".md").write_text(markdown(command, rows))
    print(markdown(command, rows))


if __name__ == "__main__":
    main()
