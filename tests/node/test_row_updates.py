"""CPU row updates equal ``index_add_`` bit for bit: repeated rows, padding entries with zero
sources on row 0, ``-0.0`` rows, NaN sources, a caller-held start."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedrec_flwr.methods.parts import OuterRows
from fedrec_flwr.node import row_updates
from fedrec_flwr.node.row_updates import RowAdder


def case(seed: int):
    """(table, index, source, alpha, start-or-None) with repeats and padding on row 0."""
    rng = np.random.default_rng(seed)
    n, width, m = int(rng.integers(1, 30)), int(rng.integers(1, 5)), int(rng.integers(1, 60))
    table = torch.from_numpy(rng.standard_normal((n, width)).astype(np.float32))
    index = torch.from_numpy(rng.integers(0, n, m))
    source = torch.from_numpy(rng.standard_normal((m, width)).astype(np.float32))
    padding = torch.from_numpy(rng.random(m) < 0.4)
    if seed % 3:  # a step's padding: zero sources pointing at row 0
        index[padding] = 0
        source[padding] = 0.0 if seed % 2 else -0.0
    if seed % 5 == 0:
        table[0, 0] = -0.0  # a zero source turns it into +0.0 under a positive alpha
    if seed % 11 == 0:
        source[0, 0] = float("nan")
    alpha = float(rng.choice([-0.1, 0.3, -1.0, 1.0]))
    start = table.index_select(0, index) if seed % 4 else None
    return table, index, source, alpha, start


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("seed", range(0, 300, 7))
def test_row_adder_is_index_add_bit_for_bit(seed, compiled, monkeypatch):
    monkeypatch.setattr(row_updates, "COMPILED_ENTRIES", 0 if compiled else 1 << 62)
    table, index, source, alpha, start = case(seed)
    expected = table.clone().index_add_(0, index, source, alpha=alpha)
    got = RowAdder().add_(table.clone(), index, source, alpha, start)
    assert torch.equal(got.view(torch.int32), expected.view(torch.int32))


def test_one_adder_serves_tables_of_any_size(monkeypatch):
    adder = RowAdder()
    for seed in (3, 40, 8, 1, 6, 13):  # growing and shrinking tables share the scratch array
        # the compiled loop and NumPy's take turns on the same scratch
        monkeypatch.setattr(row_updates, "COMPILED_ENTRIES", 0 if seed % 2 else 1 << 62)
        table, index, source, alpha, _ = case(seed)
        expected = table.clone().index_add_(0, index, source, alpha=alpha)
        got = adder.add_(table.clone(), index, source, alpha)
        assert torch.equal(got.view(torch.int32), expected.view(torch.int32))


@pytest.mark.parametrize("width", [1, 5, 8, 16, 32, 33])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_wide_rows_of_a_round_equal_index_add_(width, dtype, monkeypatch):
    """Rows as wide as a model's, values of every scale, a learning rate that rounds: the
    compiled loop (float32) and the repeated entries' loop (float64) bit for bit."""
    monkeypatch.setattr(row_updates, "COMPILED_ENTRIES", 0)
    rng = np.random.default_rng(width)
    n, m = 50, 2000  # many entries per row: long chains of repeats
    scale = 10.0 ** rng.integers(-4, 4, size=(n, 1))
    table = torch.from_numpy(rng.standard_normal((n, width)) * scale).to(dtype)
    table[0, 0] = -0.0
    index = torch.from_numpy(rng.integers(0, n, m))
    source = torch.from_numpy(rng.standard_normal((m, width))).to(dtype)
    source[rng.random(m) < 0.2] = 0.0
    for alpha in (-0.0123456789, -8.0 * 1682, 1.0):
        expected = table.clone().index_add_(0, index, source, alpha=alpha)
        got = RowAdder().add_(table.clone(), index, source, alpha)
        assert torch.equal(got, expected) and torch.equal(got.signbit(), expected.signbit())


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("seed", range(0, 60, 7))
def test_outer_rows_update_is_index_add_of_the_products(seed, compiled, monkeypatch):
    """A row gradient given as its factors (a factor per entry times a vector per user)
    updates the table as ``index_add_`` of the products' tensor does, bit for bit: zero
    factors of padding on row 0, ``-0.0`` rows, values of every scale, NaN factors."""
    monkeypatch.setattr(row_updates, "COMPILED_ENTRIES", 0 if compiled else 1 << 62)
    rng = np.random.default_rng(seed)
    users, width, dim, n = int(rng.integers(1, 9)), 64, int(rng.choice([8, 16, 32])), 40
    table = torch.from_numpy(
        (rng.standard_normal((n, dim)) * 10.0 ** rng.integers(-4, 4, (n, 1))).astype(np.float32)
    )
    table[0, 0] = -0.0
    index = torch.from_numpy(rng.integers(0, n, (users, width)))
    scale = torch.from_numpy(rng.standard_normal((users, width)).astype(np.float32))
    padding = torch.from_numpy(rng.random((users, width)) < 0.3)
    index[padding], scale[padding] = 0, 0.0
    if seed % 3 == 0:
        scale[0, 1] = float("nan")
    vector = torch.from_numpy(rng.standard_normal((users, dim)).astype(np.float32))
    outer = OuterRows(scale, vector)
    for alpha in (-0.0123456789, 1.0, -8.0 * 1682):
        source = (scale.unsqueeze(-1) * vector.unsqueeze(1)).reshape(-1, dim)
        expected = table.clone().index_add_(0, index.reshape(-1), source, alpha=alpha)
        got = RowAdder().add_outer_(table.clone(), index.reshape(-1), outer, alpha)
        assert torch.equal(got.view(torch.int32), expected.view(torch.int32))
    products = scale.unsqueeze(-1) * vector.unsqueeze(1)
    assert torch.equal(outer.tensor().view(torch.int32), products.view(torch.int32))
