"""Tests a method ships with: the conformance suite, as LensKit-style mixins.

A method's test class inherits :class:`MethodConformance` (or some of its mixins) and names
the method in ``config``; pytest then runs the suite on it (``docs/adding-a-method.md``)::

    from fedrec_lab.testing import MethodConformance

    class TestMyMethod(MethodConformance):
        config = {"method": "my-method"}

It needs pytest (the ``test`` extra). The helpers below build the suite's tiny data and
parameters, for a method's own tests.
"""

from __future__ import annotations

from fedrec_lab.testing._conformance import (
    ConformanceBase,
    FederationConformance,
    MethodConformance,
    StateConformance,
    StepConformance,
)
from fedrec_lab.testing._data import (
    STEPS,
    TINY,
    Run,
    Uploads,
    cloned,
    only_user,
    random_samples,
    row_tables,
    user_params,
)

__all__ = [
    "STEPS",
    "TINY",
    "ConformanceBase",
    "FederationConformance",
    "MethodConformance",
    "Run",
    "StateConformance",
    "StepConformance",
    "Uploads",
    "cloned",
    "only_user",
    "random_samples",
    "row_tables",
    "user_params",
]
