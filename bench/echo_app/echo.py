"""Flower's floor for ``bench/scale.py``, as the Flower app ``flwr run`` starts: the echo
ServerApp and ClientApp of :mod:`fedrec_lab.scaling.echo`."""

from fedrec_lab.scaling.echo import client, server

__all__ = ["client", "server"]
