"""Adam state kept as private parameters, so that it persists per user across rounds.

A method whose private parameter ``p`` should step with Adam (FedRecGEL's reference code:
its user embeddings) adds, beside its private parameters, the moments ``p/adam-m`` and
``p/adam-v`` and one step count per user (``ADAM_STEPS``), all from :func:`adam_state`,
and leaves them out of its phases. The local optimiser (:mod:`fedrec_flwr.node.optim`) sees
the moments and steps ``p`` with Adam; the node keeps them with the user's private state.
"""

from __future__ import annotations

import torch

#: Per-user count of the user's own Adam steps.
ADAM_STEPS = "adam-steps"


def adam_moment_names(name: str) -> tuple[str, str]:
    """The private parameters that hold ``name``'s Adam moments (first, second)."""
    return f"{name}/adam-m", f"{name}/adam-v"


def adam_state(private: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Zero Adam state (moments and step counts) for the private parameters ``private``,
    stacked per user."""
    users = next(iter(private.values())).shape[0] if private else 0
    state = {ADAM_STEPS: torch.zeros(users, dtype=torch.float32)}
    for name, value in private.items():
        first, second = adam_moment_names(name)
        state[first], state[second] = torch.zeros_like(value), torch.zeros_like(value)
    return state


def is_adam_state(name: str) -> bool:
    """Is ``name`` Adam state (not a parameter that is trained)?"""
    return name == ADAM_STEPS or name.endswith(("/adam-m", "/adam-v"))
