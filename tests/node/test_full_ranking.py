"""The exact fast path of full rankings (``strict``, linear score heads): the same ranks as the
materialised fixed-order scores, whatever the blocking, with ties, held rows, NaN rows and
every comparison left to the fixed order; and the fixed order itself."""

import numpy as np
import pytest
import torch

import fedrec_flwr.node.fixed_order_scan as fixed_order_scan
import fedrec_flwr.node.full_ranking as full_ranking
import fedrec_flwr.node.protocols as protocols
import fedrec_flwr.node.rank_entries as rank_entries
from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import prepare
from fedrec_flwr.methods.capabilities import linear_head
from fedrec_flwr.methods.heads import fixed_order_dots
from fedrec_flwr.methods.layout import layout
from fedrec_flwr.node.personal import PersonalRows
from fedrec_flwr.node.runtime import NodeRuntime

pytestmark = pytest.mark.usefixtures("private_cache")

SMALL = {
    "dataset": "synthetic",
    "synthetic-users": 48,
    "synthetic-items": 260,
    "synthetic-mean-degree": 12,
    "protocol": "strict",
    "embedding-dim": 8,
}
VARIANTS = {
    "pfedrec": {"method": "pfedrec"},
    "fedmf": {"method": "fedmf"},
    "fedmf-dual": {"method": "fedmf", "personalization": "dual"},
    "fedrap": {"method": "fedrap"},
    "pfedrec-plgc": {"method": "pfedrec", "plgc": True},
}


def node_with_state(variant: str, seed: int, nodes: int = 1, partition: int = 0):
    """A node and a state with random parameters, a table of few distinct rows (many exact
    ties) and personal rows holding some held-out items, one of them NaN."""
    config = RunConfig.from_mapping({**SMALL, **VARIANTS[variant]})
    prepared = prepare(config)
    runtime = NodeRuntime(config, prepared, partition, nodes)
    state = runtime.initial_state()
    rng = np.random.default_rng(seed)
    dim = runtime.method.row_dim
    table = rng.normal(size=(11, dim)).astype(np.float32)[np.arange(prepared.num_items) % 11]
    for value in state.private.values():
        value.copy_(torch.from_numpy(rng.normal(size=value.shape).astype(np.float32)))
    if layout(runtime.method).personal_rows:
        positions, items = [], []
        for p, user in enumerate(runtime.users):
            chosen = rng.choice(prepared.num_items, 4, replace=False).tolist()
            if p % 3 == 0:
                chosen.append(int(prepared.valid_item[user]))
            if p % 4 == 1:
                chosen.append(int(prepared.test_item[user]))
            chosen = np.unique(chosen)
            positions += [p] * len(chosen)
            items += chosen.tolist()
        rows = table[np.array(items)].copy()
        rows[::5] += rng.normal(size=rows[::5].shape).astype(np.float32) * 0.2
        rows[3] = np.nan
        everyone = np.arange(len(runtime.users))
        store = PersonalRows.empty(len(runtime.users), dim)
        state.personal = store.replaced(everyone, np.array(positions), np.array(items), rows)
    return runtime, state, table


def evaluated(runtime, state, table, fast: bool, monkeypatch):
    monkeypatch.setattr(type(runtime), "erank_positions", property(lambda self: np.empty(0)))
    if not fast:
        monkeypatch.setattr(protocols, "linear_full_ranks", lambda *args, **kwargs: None)
    sums, users, values = runtime.evaluate_users(state, None, table)
    monkeypatch.undo()
    return sums, users, values


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_fast_ranks_equal_the_materialised_fixed_order_scores(variant, monkeypatch):
    runtime, state, table = node_with_state(variant, seed=1)
    assert linear_head(runtime.method, runtime._eval_params(state, np.arange(2), {})) is not None
    fast = evaluated(runtime, state, table, True, monkeypatch)
    slow = evaluated(runtime, state, table, False, monkeypatch)
    assert fast[0] == slow[0]
    assert np.array_equal(fast[1], slow[1])
    assert np.array_equal(fast[2], slow[2])


@pytest.mark.parametrize("variant", ["pfedrec", "fedmf-dual", "fedrap"])
def test_the_compiled_fixed_order_loop_gives_the_materialised_ranks(variant, monkeypatch):
    """The CPU's compiled loop (every score in the fixed order, no bound) on every call, the
    catalogue in several tiles: the ranks of the materialised fixed-order scores, ties, held
    rows and NaN rows included."""
    runtime, state, table = node_with_state(variant, seed=6)
    slow = evaluated(runtime, state, table, False, monkeypatch)
    monkeypatch.setattr(fixed_order_scan, "MIN_SCORES", 0)
    monkeypatch.setattr(fixed_order_scan, "TILE_BYTES", 1)  # tiles of 64 items
    monkeypatch.setattr(type(runtime), "erank_positions", property(lambda self: np.empty(0)))
    calls = []
    compiled = fixed_order_scan.decide_in_fixed_order
    monkeypatch.setattr(
        fixed_order_scan, "decide_in_fixed_order", lambda *a: calls.append(1) or compiled(*a)
    )
    fast = runtime.evaluate_users(state, None, table)
    assert calls
    assert fast[0] == slow[0]
    assert np.array_equal(fast[1], slow[1])
    assert np.array_equal(fast[2], slow[2])


@pytest.mark.parametrize("tile_bytes", [fixed_order_scan.TILE_BYTES, 1])
@pytest.mark.parametrize("dim", [1, 3, 5, 8, 12, 32, 33])
def test_the_compiled_loop_s_scores_are_the_fixed_order_dots(dim, tile_bytes, monkeypatch):
    """Scores, counts and picked scores of the compiled loop against fixed_order_dots (plus
    the bias) on random rows of mixed scales, with exact ties and a NaN row; the catalogue
    in one tile of items or in several (the last one partly filled)."""
    monkeypatch.setattr(fixed_order_scan, "TILE_BYTES", tile_bytes)
    rng = np.random.default_rng(dim)
    users, items = 9, 150
    scale = 10.0 ** rng.integers(-3, 4, (items, 1))
    table = (rng.normal(size=(items, dim)) * scale).astype(np.float32)
    table[5] = table[6]
    table[9] = np.nan
    weight = rng.normal(size=(users, dim)).astype(np.float32)
    bias = rng.normal(size=users).astype(np.float32)
    expected = fixed_order_dots(torch.from_numpy(table)[None], torch.from_numpy(weight)[:, None])
    expected = (expected + torch.from_numpy(bias)[:, None]).numpy()
    targets = expected[:, [5, 11]]
    keys = np.unique(rng.integers(0, users * items, 40))
    owner = keys // items
    entries = rank_entries.Entries(
        owner, keys - owner * items, np.zeros(len(keys), np.uint8), np.zeros(len(keys))
    )
    sample = rng.integers(0, items, (users, 6))
    counts, entry_scores, sample_scores = fixed_order_scan.fixed_order_scores(
        weight, bias, np.ascontiguousarray(table.T), targets, entries, sample
    )
    for k in range(2):
        beats = rank_entries.beats(expected, targets[:, k : k + 1])
        assert np.array_equal(counts[:, k], beats.sum(1))
    assert np.array_equal(entry_scores, expected[entries.owner, entries.items], equal_nan=True)
    picked = np.take_along_axis(expected, sample, axis=1)
    assert np.array_equal(sample_scores, picked, equal_nan=True)


def test_the_kept_padded_table_gives_the_fresh_forms_scores(monkeypatch):
    """A table's padded forms made once and kept (one per tile size) give the scores of
    forms made afresh on every call, call after call."""
    rng = np.random.default_rng(7)
    users, items, dim = 6, 300, 12
    table_t = rng.normal(size=(dim, items)).astype(np.float32)
    weight = rng.normal(size=(users, dim)).astype(np.float32)
    bias = rng.normal(size=users).astype(np.float32)
    targets = rng.normal(size=(users, 2)).astype(np.float32)
    keys = np.unique(rng.integers(0, users * items, 30))
    owner = keys // items
    entries = rank_entries.Entries(
        owner, keys - owner * items, np.zeros(len(keys), np.uint8), np.zeros(len(keys))
    )
    sample = rng.integers(0, items, (users, 5))
    kept = fixed_order_scan.PaddedTable(torch.from_numpy(table_t))
    for tile_bytes in (fixed_order_scan.TILE_BYTES, 1, fixed_order_scan.TILE_BYTES):
        monkeypatch.setattr(fixed_order_scan, "TILE_BYTES", tile_bytes)
        fresh = fixed_order_scan.fixed_order_scores(
            weight, bias, table_t.copy(), targets, entries, sample
        )
        for _ in range(2):
            again = fixed_order_scan.fixed_order_scores(
                weight, bias, kept, targets, entries, sample
            )
            for got, expected in zip(again, fresh, strict=True):
                assert np.array_equal(got, expected)
    assert len(kept._tiles) == 2 and len(kept._rows) == 1


def test_every_comparison_left_to_the_fixed_order_gives_the_same_ranks(monkeypatch):
    """A bound so wide that the matrix product decides nothing: every comparison is made
    from fixed-order scores; and one user per block of the product."""
    runtime, state, table = node_with_state("pfedrec", seed=2)
    reference = evaluated(runtime, state, table, True, monkeypatch)
    monkeypatch.setattr(full_ranking, "UNIT", 1e-3)
    monkeypatch.setattr(full_ranking, "BLOCK_SCORES", 1)
    monkeypatch.setattr(full_ranking, "CPU_BLOCK_SCORES", 1)
    runtime, state, table = node_with_state("pfedrec", seed=2)
    monkeypatch.setattr(type(runtime), "erank_positions", property(lambda self: np.empty(0)))
    wide = runtime.evaluate_users(state, None, table)
    assert wide[0] == reference[0]
    assert np.array_equal(wide[2], reference[2])


@pytest.mark.parametrize("unit", [full_ranking.UNIT, 1e-3])
def test_the_device_s_tensor_scan_decides_as_the_host_scan(unit, monkeypatch):
    """The tensor scan (the device's), run on the CPU, gives the host scan's ranks, with the
    usual bound and one so wide that every comparison is left to the fixed order."""
    runtime, state, table = node_with_state("pfedrec", seed=4)
    monkeypatch.setattr(type(runtime), "erank_positions", property(lambda self: np.empty(0)))
    monkeypatch.setattr(full_ranking, "UNIT", unit)
    host = runtime.evaluate_users(state, None, table)
    monkeypatch.setattr(full_ranking, "_scan_host", full_ranking._scan_tensors)
    tensors = runtime.evaluate_users(state, None, table)
    assert tensors[0] == host[0]
    assert np.array_equal(tensors[2], host[2])


@pytest.mark.parametrize("block", [1, 700, full_ranking.DEVICE_BLOCK_SCORES])
def test_the_tensor_scan_s_ranks_do_not_depend_on_its_block(block, monkeypatch):
    """The tensor scan (the device's, run on the CPU) with blocks of one user, of a few, or
    of the device's size (every user in one block): the host scan's ranks."""
    runtime, state, table = node_with_state("pfedrec", seed=5)
    monkeypatch.setattr(type(runtime), "erank_positions", property(lambda self: np.empty(0)))
    host = runtime.evaluate_users(state, None, table)
    monkeypatch.setattr(full_ranking, "_scan_host", full_ranking._scan_tensors)
    monkeypatch.setattr(full_ranking, "BLOCK_SCORES", block)
    tensors = runtime.evaluate_users(state, None, table)
    assert tensors[0] == host[0]
    assert np.array_equal(tensors[2], host[2])


def test_a_user_s_ranks_do_not_depend_on_its_node(monkeypatch):
    one = node_with_state("fedrap", seed=3)
    alone = evaluated(*one, True, monkeypatch)
    for partition in range(2):
        runtime, state, table = node_with_state("fedrap", seed=3, nodes=2, partition=partition)
        where = one[0].positions_of(runtime.users)
        state.private = {name: value[where] for name, value in one[1].private.items()}
        _, users, values = evaluated(runtime, state, table, True, monkeypatch)
        assert np.array_equal(values, alone[2][users])


def reference_order(rows: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """The documented order, in NumPy float32 (each operation rounded as IEEE prescribes)."""
    products = (rows * weight).astype(np.float32)
    width = max(8, -(-products.shape[1] // 4) * 4)
    products = np.pad(products, ((0, 0), (0, width - products.shape[1])))
    head = ((products[:, 0] + products[:, 1]) + products[:, 2]) + products[:, 3]
    sums = [products[:, 4 + lane].copy() for lane in range(4)]
    sums[0] = head + sums[0]
    for k in range(8, width):
        sums[k % 4] = sums[k % 4] + products[:, k]
    return (sums[0] + sums[2]) + (sums[1] + sums[3])


@pytest.mark.parametrize("dim", [1, 3, 5, 8, 12, 32, 33])
def test_fixed_order_dots_follow_the_documented_order(dim):
    rng = np.random.default_rng(dim)
    scale = 10.0 ** rng.integers(-3, 4, (500, 1))
    rows = (rng.normal(size=(500, dim)) * scale).astype(np.float32)
    weight = rng.normal(size=(500, dim)).astype(np.float32)
    got = fixed_order_dots(torch.from_numpy(rows), torch.from_numpy(weight)).numpy()
    assert np.array_equal(got, reference_order(rows, weight))
    # one pair at a time, or broadcast against one weight: the same bits
    single = fixed_order_dots(torch.from_numpy(rows[:7]), torch.from_numpy(weight[3]))
    assert np.array_equal(single.numpy(), reference_order(rows[:7], np.tile(weight[3], (7, 1))))


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("slots", [1, 7, 1 << 18])
def test_the_sampled_items_position_map_finds_what_the_binary_search_finds(
    slots, compiled, monkeypatch
):
    """Each sampled (user, item)'s entry, or -1, whatever the users per block of the map
    (users without entries, items held by other users, the last item), in NumPy blocks or
    in the compiled loop."""
    monkeypatch.setattr(rank_entries, "COMPILED_PAIRS", 1 if compiled else 1 << 62)
    rng = np.random.default_rng(5)
    users, items = 40, 30
    keys = np.unique(rng.integers(0, users * items, 300))
    keys = keys[(keys // items) % 7 != 3]  # some users hold nothing
    owner = keys // items
    entries = rank_entries.Entries(
        owner, keys - owner * items, np.zeros(len(keys), np.uint8), np.zeros(len(keys))
    )
    sample = rng.integers(0, items, (users, 12))
    sample[:, 0] = items - 1
    expected = entries.where(np.repeat(np.arange(users), 12), sample.reshape(-1), items)
    monkeypatch.setattr(rank_entries, "MAP_SLOTS", slots)
    found = rank_entries.sampled_where(entries, sample, items)
    assert np.array_equal(found.reshape(-1), expected)
    assert (found >= 0).any() and (found < 0).any()


@pytest.mark.parametrize("seed", range(6))
def test_the_compiled_pair_map_is_the_numpy_blocks(seed, monkeypatch):
    """pair_where's compiled loop against its NumPy blocks on random pairs: no pairs at all,
    users past the last owner, one item, empty rows of wanted items, the last users only."""
    rng = np.random.default_rng(seed)
    users, items = int(rng.integers(1, 60)), int(rng.integers(1, 50))
    keys = np.unique(rng.integers(0, users * items, int(rng.integers(0, users * items + 1))))
    if seed == 1:
        keys = keys[keys >= (users - 1) * items]  # only the last user holds pairs
    owner, held = keys // items, keys % items
    for width in (0, 1, 9):
        wanted = rng.integers(0, items, (users, width))
        monkeypatch.setattr(rank_entries, "COMPILED_PAIRS", 1 << 62)
        blocks = rank_entries.pair_where(owner, held, wanted, items)
        monkeypatch.setattr(rank_entries, "COMPILED_PAIRS", 0)
        compiled = rank_entries.pair_where(owner, held, wanted, items)
        assert compiled.dtype == blocks.dtype == np.int64
        assert np.array_equal(compiled, blocks)


def test_the_compiled_loop_takes_large_float32_calls_on_the_cpu_only():
    """Its arithmetic is float32's: a float64 head, or a small call, keeps the bounded path."""
    weight, bias = torch.zeros(4096, 8), torch.zeros(4096)
    assert fixed_order_scan.applies(weight, bias, 4096)
    assert fixed_order_scan.applies(weight, None, 4096)
    assert not fixed_order_scan.applies(weight, bias, 4000)
    assert not fixed_order_scan.applies(weight.double(), bias, 4096)
    assert not fixed_order_scan.applies(weight, bias.double(), 4096)


@pytest.mark.parametrize("dim", [3, 8, 32])
def test_the_compiled_pair_scores_are_the_fixed_order_dots(dim):
    """The compiled pair loop's scores (pairs in any order, repeated, with or without a
    bias) are fixed_order_dots' plus the bias, to the bit."""
    rng = np.random.default_rng(dim)
    users, items = 7, 40
    table = rng.normal(size=(items, dim)).astype(np.float32)
    table[3] = np.nan
    weight = torch.from_numpy(rng.normal(size=(users, dim)).astype(np.float32))
    bias = torch.from_numpy(rng.normal(size=users).astype(np.float32))
    padded = fixed_order_scan.PaddedTable(np.ascontiguousarray(table.T))
    owner, item = rng.integers(0, users, 90), rng.integers(0, items, 90)
    dots = fixed_order_dots(torch.from_numpy(table[item]), weight[owner])
    for head in (bias, None):
        want = (dots if head is None else dots + head[owner]).numpy()
        got = fixed_order_scan.pair_scores(weight, head, padded, owner, item)
        assert got.dtype == np.float32
        assert np.array_equal(got, want, equal_nan=True)
