"""The torch device a node computes on (``device``), checked and made deterministic.

On CUDA, ``cuda-deterministic = true`` (the default) turns on PyTorch's deterministic
algorithms: ``index_add_`` then sums a row's updates in a fixed order instead of with
atomics. cuBLAS needs ``CUBLAS_WORKSPACE_CONFIG`` set for that; it is set here unless the
environment sets it already. Packed and one-by-one runs still agree only within float32
rounding on CUDA (its reduction kernels choose their strategy by shape: 4e-9 relative in the
train loss on an H200, ``tests/apps/test_cuda.py``); on the CPU they agree bit for bit.
Deterministic mode's NaN fill of new tensors (``fill_uninitialized_memory``) is turned off:
every tensor the node reads it has written.
"""

from __future__ import annotations

import os

import torch

from fedrec_flwr.config import ConfigError, RunConfig

CUBLAS_WORKSPACE = ":4096:8"


def torch_device(config: RunConfig) -> torch.device:
    """The device of ``config.execution.device``; a clear error if this machine cannot use it."""
    device = torch.device(config.execution.device)
    if device.type != "cuda":
        return device
    if not torch.cuda.is_available():
        raise ConfigError(
            f"device='{config.execution.device}' but this PyTorch sees no CUDA GPU "
            f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'}): install "
            "a CUDA build of torch on a machine with a GPU, or set device='cpu'."
        )
    index = device.index or 0
    if index >= torch.cuda.device_count():
        raise ConfigError(
            f"device='{config.execution.device}' but this machine has {torch.cuda.device_count()} "
            f"GPU(s) (cuda:0 to cuda:{torch.cuda.device_count() - 1})."
        )
    if config.execution.cuda_deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
        torch.use_deterministic_algorithms(True)
        # Deterministic mode also fills every new tensor (host ones too) with NaN: no value
        # here reads memory it did not write, so the fill is only cost.
        # (torch.utils.deterministic sets the attribute through its module class: the
        # stubs do not declare it)
        torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]
    return device
