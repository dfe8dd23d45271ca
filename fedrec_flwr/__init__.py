"""fedrec_flwr: personalised federated recommendation on Flower."""

__version__ = "0.1.0"
