"""What the strategy, the checkpoints and the ServerApp ask of the server's model.

Two models stand behind it: :class:`~fedrec_flwr.server.model.ServerModel` (the methods that
train item rows: the global table, updated from the round's row uploads) and
:class:`~fedrec_flwr.server.statistics.StatisticsModel` (the item-item methods: the table
computed from the released sums of co-occurrences). :class:`GlobalModel` is their common
contract; each reads the round's uploads of its own kind (:func:`fedrec_flwr.stages.uploads_of`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from fedrec_flwr.stages import NodeUpload, ServerChain, Upload

__all__ = ["GlobalModel"]


class GlobalModel(Protocol):
    """The global item table a run serves (``float32 [items, row_dim]``), its shared-dense
    parameters, and the round's update from the users' uploads."""

    #: The table served to the nodes (row ``i``: item ``i``'s row).
    table: np.ndarray
    #: The shared-dense parameters, by name.
    dense: dict[str, np.ndarray]
    #: Rows at or below it are zero and sent as ids only (None: dense rows).
    zero_threshold: float | None
    #: Which rows any round has touched.
    touched_ever: np.ndarray
    #: The server's stages in front of the update (decoding, denoising, defences).
    stages: ServerChain

    @property
    def num_items(self) -> int: ...

    @property
    def row_dim(self) -> int: ...

    def check_contributors(self, users_per_node: int) -> None:
        """Refuse a federation whose nodes of ``users_per_node`` users a stage cannot use."""
        ...

    def limit_values(self, limit: float) -> None:
        """Keep every value the round's update writes within ``limit`` (secure aggregation:
        what a user can encode)."""
        ...

    def load_initial(self, table: np.ndarray, dense: Mapping[str, np.ndarray]) -> None:
        """Take round 1's table and shared-dense parameters (checked against the model's)."""
        ...

    def start_round(self) -> None:
        """A training round starts."""
        ...

    def train_arrays(self) -> dict[str, np.ndarray]:
        """What a train message carries besides the users, rows and dense parameters."""
        ...

    def decode(self, uploads: list[NodeUpload]) -> list[NodeUpload]:
        """The round's uploads as the model's stages decode them."""
        ...

    def refusals(self, uploads: Sequence[Upload]) -> list[str | None]:
        """For each decoded upload, why it is refused (None: it is not)."""
        ...

    def apply(self, uploads: Sequence[Upload]) -> np.ndarray:
        """Update the model with the round's decoded uploads; the rows they touched."""
        ...

    def evaluation_table(self) -> np.ndarray:
        """The table evaluation reads."""
        ...

    def density(self) -> float:
        """Share of the table's rows that are not all zero."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs of the model (a checkpoint's ``server.npz``)."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`state_dict`."""
        ...
