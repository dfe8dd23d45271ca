"""What stays on a node between rounds (:class:`NodeState`): its users' private parameters,
their personal rows and their private rows. :mod:`fedrec_flwr.node.runtime` trains and
:mod:`fedrec_flwr.node.evaluate` evaluates with it; :mod:`fedrec_flwr.node.state_store` keeps
it on disk."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from fedrec_flwr.node.layered import LayeredRows, RowStore, store_from_arrays
from fedrec_flwr.node.personal import PersonalRows


@dataclass
class NodeState:
    """Private state of a node's users, indexed by position in the node's user list:
    private parameters, personal rows (tuned copies of item rows) and, per ``private-rows``
    parameter, the rows each user has trained (rows it never trained are zero)."""

    private: dict[str, torch.Tensor]
    personal: RowStore
    private_rows: dict[str, PersonalRows] = field(default_factory=dict)

    PREFIX = "private/"
    ROWS_PREFIX = "private-rows/"

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Flat numpy arrays (for ``context.state``)."""
        arrays = {self.PREFIX + k: v.cpu().numpy() for k, v in self.private.items()}
        arrays.update(self.personal.to_arrays())
        for name, store in self.private_rows.items():
            prefix = f"{self.ROWS_PREFIX}{name}/"
            arrays.update({prefix + k: v for k, v in store.to_arrays().items()})
        return arrays

    def compacted(self) -> NodeState:
        """The same state with a layered personal-row store as its one CSR store (the live
        rows only: what a state file keeps, readable by any version of this runtime)."""
        if not isinstance(self.personal, LayeredRows):
            return self
        return NodeState(self.private, self.personal.compact(), self.private_rows)

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> NodeState:
        """Inverse of :meth:`to_arrays`."""
        private = {
            k[len(cls.PREFIX) :]: torch.from_numpy(np.array(v))
            for k, v in arrays.items()
            if k.startswith(cls.PREFIX)
        }
        stores: dict[str, dict[str, np.ndarray]] = {}
        for key, value in arrays.items():
            if key.startswith(cls.ROWS_PREFIX):
                name, _, array = key[len(cls.ROWS_PREFIX) :].rpartition("/")
                stores.setdefault(name, {})[array] = value
        return cls(
            private=private,
            personal=store_from_arrays(arrays),
            private_rows={name: PersonalRows.from_arrays(a) for name, a in stores.items()},
        )
