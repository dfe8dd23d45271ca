"""What the server knows of each node (plain numpy): learnt in the handshake
(:mod:`fedrec_flwr.server.handshake`), and the rows it asked for next, updated by its replies."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedrec_flwr.data.device import DataIdentity


@dataclass
class NodeInfo:
    """What the server knows of a node after the handshake."""

    partition_id: int
    num_partitions: int
    users: np.ndarray
    eval_items: np.ndarray | None  # None: the node ranks all items
    data: DataIdentity | None = None
    request_round: int = 0
    request_items: np.ndarray | None = None

    def remember_request(
        self, arrays: Mapping[str, np.ndarray], metrics: Mapping[str, Any]
    ) -> None:
        """Keep the ``next-items`` request of a reply (its arrays and metrics), if it has
        one."""
        if "next-items" in arrays:
            self.request_round = int(metrics["next-round"])
            # A copy: the array may be a view of the whole reply's packed bytes.
            self.request_items = np.array(arrays["next-items"])
