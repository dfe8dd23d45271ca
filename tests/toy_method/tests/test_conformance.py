"""The toy held to fedrec-flwr's conformance suite, as the package's own tests: installed,
the method is found through its entry point, with no registration here."""

from __future__ import annotations

from typing import ClassVar

from fedrec_lab.testing import MethodConformance


class TestToyMF(MethodConformance):
    config: ClassVar = {"method": "toy", "toy-temperature": 0.5}
