"""What the data layer reads of a run's configuration: :class:`DataSettings`, its groups.

The data layer takes the run's values (:class:`~fedrec_flwr.run_keys.RunGroups`, which a
:class:`~fedrec_flwr.config.RunConfig` is) or these settings alone, and reads only the
groups below: which dataset and where its files are, the protocol of the split, and the
keys of the generated and of the user's own dataset.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from fedrec_flwr.data.registry import DataKeys, SyntheticKeys
from fedrec_flwr.data.user_keys import FileKeys
from fedrec_flwr.run_keys import RunGroups

#: The data folder when ``data-dir`` is empty.
DATA_DIR_ENV = "FEDREC_DATA_DIR"


@dataclass(frozen=True)
class DataSettings:
    """The values that choose, read and split a dataset."""

    data: DataKeys
    protocol: str
    synthetic: SyntheticKeys
    file: FileKeys

    @classmethod
    def of(cls, config: RunGroups | DataSettings) -> DataSettings:
        """The data settings of a run's values (or the settings themselves)."""
        if isinstance(config, DataSettings):
            return config
        return cls(
            data=config.group(DataKeys),
            protocol=config.training.protocol,
            synthetic=config.group(SyntheticKeys),
            file=config.group(FileKeys),
        )

    @property
    def dataset(self) -> str:
        return self.data.dataset

    def resolved_data_dir(self) -> str:
        """``data-dir``, else ``$FEDREC_DATA_DIR``, else '' (= download into the cache)."""
        return self.data.data_dir or os.environ.get(DATA_DIR_ENV, "")
