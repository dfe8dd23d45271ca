"""What a method declares besides its model, for tuning and the privacy audit.

A method class states its search space (``search_space``: run-config key -> :class:`Dim`,
tried in that order) and, if the privacy audit can imitate its local update, how
(``audit``: an :class:`AuditImitation`). Its own run-config keys are a
:class:`~fedrec_flwr.schema.KeyGroup` (``config_keys``). The ranges below are those of the
keys every method reads, shared by the methods' search spaces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fedrec_flwr.schema import Dim

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
