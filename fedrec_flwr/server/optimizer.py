"""Server optimisers on the aggregated change (``server-optimizer``).

The round's aggregate gives, for each touched item row and each shared-dense parameter, a
change ``delta`` (the mean of the users' changes). ``none`` applies it as it is (FedAvg).
``sgd-momentum`` and ``adam`` treat ``-delta`` as a pseudo-gradient (Reddi et al., 2021): a
client that took one SGD step with learning rate 1 uploads exactly minus its gradient, so
FedRecGEL's "clients send SAM gradients, the server applies Adam" is ``adam`` here. Dense
parameters are updated every round. Rows (``server-optimizer-rows``): ``touched`` keeps each
row's own state and updates a row only when touched (lazy, per-row step counts for Adam's
bias correction); ``all`` steps the whole table every round with a zero pseudo-gradient for
the untouched rows (dense, one step count: FedRecGEL's reference code).
"""

from __future__ import annotations

import numpy as np

from fedrec_flwr.learning_keys import OptimizedRows

BETA2, EPS = 0.999, 1e-8


class ServerOptimizer:
    """Per-row and per-dense-parameter state of the chosen rule."""

    def __init__(
        self, rule: str, lr: float, momentum: float, rows: str = OptimizedRows.TOUCHED
    ) -> None:
        if rule not in ("none", "sgd-momentum", "adam"):
            raise ValueError(f"unknown server optimizer '{rule}'")
        self.rule, self.lr, self.momentum = rule, lr, momentum
        self.rows = OptimizedRows(rows)
        self.state: dict[str, dict[str, np.ndarray]] = {}

    def update_rows(self, table: np.ndarray, touched: np.ndarray, delta: np.ndarray) -> np.ndarray:
        """New table from the float64 change ``delta`` of the rows ``touched``."""
        if self.rule != "none" and self.rows is OptimizedRows.ALL:
            return self._update_all_rows(table, touched, delta)
        new_table = table.copy()
        base = table[touched].astype(np.float64)
        if self.rule == "none":
            new_table[touched] = (base + delta).astype(table.dtype)
            return new_table
        state = self._state("rows", table.shape)
        new_table[touched] = (base - self._step(state, touched, -delta)).astype(table.dtype)
        return new_table

    def _update_all_rows(
        self, table: np.ndarray, touched: np.ndarray, delta: np.ndarray
    ) -> np.ndarray:
        """Every row steps; the pseudo-gradient of an untouched row is zero."""
        grad = np.zeros(table.shape)
        grad[touched] = -delta
        every = np.arange(len(table))
        step = self._step(self._state("rows", table.shape), every, grad)
        return (table.astype(np.float64) - step).astype(table.dtype)

    def update_dense(self, name: str, value: np.ndarray, delta: np.ndarray) -> np.ndarray:
        """New value of a shared-dense parameter from its float64 change."""
        if self.rule == "none":
            return (value.astype(np.float64) + delta).astype(value.dtype)
        state = self._state(name, (1, *value.shape))
        step = self._step(state, np.zeros(1, dtype=np.int64), -delta[None])[0]
        return (value.astype(np.float64) - step).astype(value.dtype)

    def _state(self, name: str, shape: tuple[int, ...]) -> dict[str, np.ndarray]:
        if name not in self.state:
            self.state[name] = {
                "m": np.zeros(shape),
                "v": np.zeros(shape),
                "t": np.zeros(shape[0], dtype=np.int64),
            }
        return self.state[name]

    def _step(self, state: dict, index: np.ndarray, grad: np.ndarray) -> np.ndarray:
        """The amount to subtract at ``index`` for pseudo-gradient ``grad``."""
        m = state["m"][index]
        if self.rule == "sgd-momentum":
            m = self.momentum * m + grad
            state["m"][index] = m
            return self.lr * m
        beta1 = self.momentum
        t = state["t"][index] + 1
        m = beta1 * m + (1 - beta1) * grad
        v = BETA2 * state["v"][index] + (1 - BETA2) * grad**2
        state["m"][index], state["v"][index], state["t"][index] = m, v, t
        shape = (-1,) + (1,) * (grad.ndim - 1)
        m_hat = m / (1 - beta1 ** t.reshape(shape))
        v_hat = v / (1 - BETA2 ** t.reshape(shape))
        return self.lr * m_hat / (np.sqrt(v_hat) + EPS)

    def state_arrays(self) -> dict[str, np.ndarray]:
        """The optimiser state as flat arrays (for checkpoints)."""
        return {f"{n}/{k}": a for n, s in self.state.items() for k, a in s.items()}

    def load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Inverse of :meth:`state_arrays` (a resumed run)."""
        self.state = {}
        for key, array in arrays.items():
            name, _, part = key.rpartition("/")
            self.state.setdefault(name, {})[part] = np.array(array)
