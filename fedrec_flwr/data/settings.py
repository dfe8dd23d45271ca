"""What the data layer reads of a run's configuration: :class:`DataSettings`.

A :class:`~fedrec_flwr.config.RunConfig` has all of it. The data layer names this protocol
instead of importing the config, which sits above it (the config composes the keys that the
datasets declare next to :mod:`fedrec_flwr.data.registry`)."""

from __future__ import annotations

from typing import Protocol


class DataSettings(Protocol):
    """The run-config values that choose, read and split a dataset (snake_case keys; the
    ``dataset = "file"`` keys are read by :mod:`fedrec_flwr.data.user_dataset`)."""

    dataset: str
    protocol: str
    train_pairs: str
    data_file: str
    synthetic_users: int
    synthetic_items: int
    synthetic_mean_degree: int

    def resolved_data_dir(self) -> str:
        """``data-dir``, else ``$FEDREC_DATA_DIR``, else '' (= download into the cache)."""
        ...
