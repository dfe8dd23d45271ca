"""Where a method's parameters live: the name lists the node, the messages and the server
read, computed once per method object from its roles (``Method.roles``), its private
parameters (``Method.init_private``) and its dense ones (``Method.init_dense``).

They are a value computed from the (possibly composed) method, not members of it: a plug-in
that wraps a method and adds parameters (PLGC) is counted by the same code.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from fedrec_flwr.methods.parts import ROW_ROLES, ROWS, Role


class Declared(Protocol):
    """What a layout is computed from: the members of ``Method`` that declare its
    parameters."""

    @property
    def name(self) -> str: ...

    def roles(self) -> dict[str, Role]: ...

    def init_private(self, users: np.ndarray) -> Mapping[str, object]: ...

    def init_dense(self) -> Mapping[str, object]: ...


class RowsPersist(Protocol):
    """A plug-in whose users start a round's item rows from their personal copies
    (PLGC under ``plgc-persist``)."""

    @property
    def train_from_personal(self) -> bool: ...


@dataclass(frozen=True)
class Layout:
    """A method's parameters by where they live.

    - ``roles``: the role of every parameter;
    - ``private``: the private parameters (stacked per user), those of ``init_private``;
    - ``dense``: the method's dense parameters, those of ``init_dense`` (shared-dense, or
      private under dual personalisation);
    - ``shared_dense``: those averaged over the round's users;
    - ``rows``: the flat row tables aligned with the item rows, ``ROWS`` first;
    - ``private_rows``: per-user rows kept on the device (role ``private-rows``);
    - ``global_rows``: frozen copies of the received global rows (role ``global-rows``);
    - ``kept_private``: the per-user parameters kept in the node state (role ``private``);
    - ``personal_rows``: does the user keep its tuned item rows and evaluate with them (the
      rows' role is ``personal-rows``)?
    - ``train_from_personal``: does a user start a round's item rows from its personal
      copies (where it has them) instead of the global rows (:class:`RowsPersist`)?
    """

    roles: dict[str, Role]
    private: tuple[str, ...]
    dense: tuple[str, ...]
    shared_dense: tuple[str, ...]
    rows: tuple[str, ...]
    private_rows: tuple[str, ...]
    global_rows: tuple[str, ...]
    kept_private: tuple[str, ...]
    personal_rows: bool
    train_from_personal: bool

    @property
    def eval_table(self) -> str:
        """Global table evaluation reads for rows a user has no personal copy of:
        ``round-start`` (the table sent at the start of the latest training round, as the
        PFedRec reference code does) or ``latest`` (after that round's aggregation)."""
        return "round-start" if self.personal_rows else "latest"

    def with_role(self, *roles: Role) -> tuple[str, ...]:
        """The parameters whose role is one of ``roles``, in role order."""
        return _with_role(self.roles, roles)


def _with_role(roles: Mapping[str, Role], wanted: tuple[Role, ...]) -> tuple[str, ...]:
    return tuple(name for name, role in roles.items() if role in wanted)


_LAYOUTS: weakref.WeakKeyDictionary[Declared, Layout] = weakref.WeakKeyDictionary()


def layout(method: Declared) -> Layout:
    """The layout of ``method``, computed on first use (the names do not change, computing
    them initialises parameters, and the node reads them on every message)."""
    found = _LAYOUTS.get(method)
    if found is None:
        found = _LAYOUTS[method] = _computed(method)
    return found


def forget(method: Declared) -> None:
    """Drop ``method``'s computed layout, for a change of what its roles depend on (the
    DualPer flag, :attr:`fedrec_flwr.methods.base.Method.dual`)."""
    _LAYOUTS.pop(method, None)


def describe(method: Declared) -> dict[str, str]:
    """The method's name and its parameters' roles, for logs."""
    return {"method": method.name, **{k: v.value for k, v in layout(method).roles.items()}}


def _computed(method: Declared) -> Layout:
    roles = method.roles()
    rows = (ROWS, *(n for n, r in roles.items() if r in ROW_ROLES and n != ROWS))
    return Layout(
        roles=roles,
        private=tuple(method.init_private(np.empty(0, np.int64))),
        dense=tuple(method.init_dense()),
        shared_dense=_with_role(roles, (Role.SHARED_DENSE,)),
        rows=rows,
        private_rows=_with_role(roles, (Role.PRIVATE_ROWS,)),
        global_rows=_with_role(roles, (Role.GLOBAL_ROWS,)),
        kept_private=_with_role(roles, (Role.PRIVATE,)),
        personal_rows=roles[ROWS] is Role.PERSONAL_ROWS,
        train_from_personal=bool(getattr(method, "train_from_personal", False)),
    )
