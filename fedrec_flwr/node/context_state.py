"""A node's private state in Flower's ``context.state``, written without copying what did not
change.

``context.state`` is what a node's next message sees, in this process or another (a Ray
worker, a ClientApp process). The state goes there as records:

- ``node-state``: every array of :meth:`NodeState.to_arrays
  <fedrec_flwr.node.state.NodeState.to_arrays>` but the segments of a layered personal-row
  store (:mod:`fedrec_flwr.node.layered`);
- ``node-state-part-<id>``: one record per segment, written when the segment is new and left
  as it is while the store keeps it (a segment never changes), deleted when it drops it.

A round that adds one segment therefore packs the new rows and the small arrays, not the
whole store. The state then reads each segment from its record's bytes (read-only views), so
the rows are held once, not once as arrays and once packed. A process that reads back the
very ``node-state`` record it wrote last reuses the state it wrote instead of decoding it;
any other reader decodes the records, which hold the same arrays.

A node whose messages all run in the process that holds its ``Context`` (node config
``state-resident = true``: the in-process grid, :class:`fedrec_lab.local_grid.LocalGrid`)
keeps its state in the process instead, beside the context: ``context.state`` then holds
only a marker under ``node-state``, and nothing is packed between rounds. Checkpoints and
``state-dir`` files are written from the state as everywhere (:mod:`fedrec_flwr.node.state_store`).
"""

from __future__ import annotations

import io

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context

from fedrec_flwr.messages import PACKED, AnyRecord, array_record, record_arrays, unpack
from fedrec_flwr.node.layered import IDS, LayeredRows, segment_names
from fedrec_flwr.node.personal import PersonalRows
from fedrec_flwr.node.state import NodeState

STATE_KEY = "node-state"
PART_PREFIX = "node-state-part-"
CSR_NAMES = ("personal-indptr", "personal-items", "personal-rows")
#: per (run, node): the ``node-state`` record this process wrote last and the state in it
_WRITTEN: dict[tuple[int, int], tuple[ArrayRecord, NodeState]] = {}
#: Node-config key: every message of the node runs in the process holding its ``Context``.
RESIDENT = "state-resident"
#: The attribute of a resident node's ``Context`` that holds its state.
_HELD = "_fedrec_node_state"


def is_resident(context: Context) -> bool:
    return bool(context.node_config.get(RESIDENT, False))


def save(context: Context, state: NodeState) -> None:
    """Write ``state`` into ``context.state`` (new segments only) and remember it; on a
    resident node, keep it beside the context and leave a marker."""
    if is_resident(context):
        for key in [k for k in context.state if k.startswith(PART_PREFIX)]:
            del context.state[key]
        context.state[STATE_KEY] = ConfigRecord({RESIDENT: True})
        setattr(context, _HELD, state)
        return
    arrays = state.to_arrays()
    parts: dict[str, dict[str, np.ndarray]] = {}
    personal = state.personal
    if isinstance(personal, LayeredRows) and IDS in arrays:
        for index, segment_id in enumerate(personal.ids):
            names = segment_names(index)
            parts[PART_PREFIX + str(segment_id)] = {
                csr: arrays.pop(name) for csr, name in zip(CSR_NAMES, names, strict=True)
            }
    for key in [k for k in context.state if k.startswith(PART_PREFIX) and k not in parts]:
        del context.state[key]
    views = {}
    for index, (key, part) in enumerate(parts.items()):
        if key not in context.state:  # a segment never changes: written once
            context.state[key] = array_record(part)
        views[index] = PersonalRows.from_arrays(_views(context.state[key]))
    if views:  # the state reads its segments from the records: the rows are held once
        assert isinstance(personal, LayeredRows)  # the views are its segments'
        state.personal = personal.with_segments(views)
    record = array_record(arrays)
    context.state[STATE_KEY] = record
    _WRITTEN[(context.run_id, context.node_id)] = (record, state)


def _views(record: AnyRecord) -> dict[str, np.ndarray]:
    """The arrays of a packed record as read-only views of its bytes (no copy)."""
    if not isinstance(record, ArrayRecord):
        raise ValueError(f"a node-state segment is a {type(record).__name__}, not an ArrayRecord")
    data = record[PACKED].data
    stream = io.BytesIO(data)
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):  # the .npy header of the Array (its length fixes the offset)
        np.lib.format.read_array_header_1_0(stream)
    else:
        np.lib.format.read_array_header_2_0(stream)
    return unpack(np.frombuffer(data, np.uint8, offset=stream.tell()), copy=False)


def load(context: Context) -> NodeState | None:
    """The state in ``context.state``, or None if it holds none."""
    if STATE_KEY not in context.state:
        return None
    record = context.state[STATE_KEY]
    if isinstance(record, ConfigRecord):  # a resident node's marker
        state = getattr(context, _HELD, None)
        if state is None:
            raise RuntimeError(
                f"node-state: the node config says {RESIDENT} = true but this process does not "
                "hold the node's state (its messages ran in another process): drop "
                f"{RESIDENT} where a node's messages may run in several processes"
            )
        return state
    written = _WRITTEN.get((context.run_id, context.node_id))
    if written is not None and written[0] is record:  # the very record written here last
        return written[1]
    arrays = record_arrays(record, "state array")
    for index, segment_id in enumerate(np.asarray(arrays.get(IDS, []), np.int64).tolist()):
        key = PART_PREFIX + str(segment_id)
        if key not in context.state:
            raise RuntimeError(
                f"the node state in context.state names a segment '{key}' that is not there: "
                "its records were not written together; restart the run from a checkpoint"
            )
        part = record_arrays(context.state[key], "state array")
        for csr, name in zip(CSR_NAMES, segment_names(index), strict=True):
            arrays[name] = part[csr]
    return NodeState.from_arrays(arrays)
