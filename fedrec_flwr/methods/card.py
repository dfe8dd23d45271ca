"""A method's card: what is known about a method besides its maths.

A :class:`MethodCard` is declared beside the :class:`~fedrec_flwr.methods.base.Method`
subclass it describes and registered with it (``register_method(CARD)``, or an entry point
of the group ``fedrec_flwr.methods``): its paper, its own run-config keys, its tuning search
space, how the privacy audit imitates its local update, its paper's values for keys a run
leaves unset, the plug-ins that apply to it and the golden runs that record it. The node and
the server read the method; the run config, tuning, the audit, the documentation and the
tests read the card. The ranges below are those of the keys every method reads, shared by
the methods' search spaces.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from fedrec_flwr.methods.base import Method
from fedrec_flwr.schema import Dim, Group, Scalar

#: ``lr``: the private parameters' learning rate.
LR = Dim(0.01, 4.0)
#: ``item-lr``, times the number of items (``item-lr-scaling = "num-items"``).
ITEM_LR = Dim(0.05, 32.0)
#: ``init-std``: the spread of the initial item rows and user vectors.
INIT_STD = Dim(0.01, 1.0)
#: ``num-negatives``: negatives per train positive.
NEGATIVES = Dim(choices=(2, 4, 8))


@dataclass(frozen=True)
class AuditImitation:
    """How the audit's honest-but-curious server imitates one user's local update
    (:mod:`fedrec_lab.audit`): it knows the method and its rates, not the user's private
    parameters.

    ``update``: ``alternate`` (the score function steps, then the rows with it: PFedRec) or
    ``joint`` (both from one gradient: FedMF). ``head``: the shadow's score function,
    ``shared`` (the method's public shared initialisation) or ``random`` (a random user
    vector, the real one being private). ``train_bias``: does the shadow train a bias.
    ``ldp_clip``: ``ldp-clip`` of the audit's LDP configurations, about the median norm of a
    user's row change without protection.
    """

    update: Literal["alternate", "joint"]
    head: Literal["shared", "random"]
    train_bias: bool
    ldp_clip: float


@dataclass(frozen=True)
class MethodCard:
    """What the lab, the run config and the tests know about a method.

    - ``method``: the :class:`Method` subclass (the maths); the card's ``name`` is its
      ``name``, the ``method`` run-config key;
    - ``title``: its display name (documentation, tables); ``paper``: where it comes from;
    - ``keys``: its own run-config keys (a :class:`~fedrec_flwr.schema.Group` composed
      into the run config; several cards may share one group, FedNCF's and FedRecGEL's);
    - ``search_space``: run-config key -> range, tuned in that order (``fedrec tune``);
    - ``audit``: how the privacy audit imitates its local update (None: it does not);
    - ``reference_defaults``: its paper's values for keys a run leaves unset, in sets of keys
      that go together: a set fills its keys when the run sets none of them;
    - ``supports_dual``: may ``personalization = "dual"`` (DualPer) be applied to it;
    - ``golden``: the preset variants whose short runs ``tests/golden.json`` records besides
      the method's own preset (``"sam"``: ``conf/<name>-sam-ml100k-strict.toml``;
      ``"paper"``: the paper protocol's preset; ``"counter"``: under the counter sampler);
      ``golden_own`` False: the variants only, for a method whose presets are all variants
      (the item-item models: ``conf/itemitem-ease-ml100k-strict.toml``, ...);
    - ``order``: where a built-in method is listed among the built-in ones (the ``method``
      key's choices, the order of the run-config keys, the golden runs); methods from
      entry points or ``register_method`` follow the built-in ones in registration order.
    """

    method: type[Method]
    title: str
    paper: str
    keys: type[Group] | None = None
    search_space: Mapping[str, Dim] = field(default_factory=dict)
    audit: AuditImitation | None = None
    reference_defaults: tuple[Mapping[str, Scalar], ...] = ()
    supports_dual: bool = False
    golden: tuple[str, ...] = ()
    golden_own: bool = True
    order: int = 0

    @property
    def name(self) -> str:
        """The ``method`` run-config key: the method class's ``name``."""
        return self.method.name

    @property
    def golden_families(self) -> tuple[str, ...]:
        """The golden runs that record it (``tests/golden.py``): ``<name>``, then
        ``<name>-<variant>`` for each of ``golden`` (the variants only: ``golden_own``
        False)."""
        own = (self.name,) if self.golden_own else ()
        return (*own, *(f"{self.name}-{variant}" for variant in self.golden))
