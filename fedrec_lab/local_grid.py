"""An in-process Flower ``Grid``: runs the ClientApp for each message directly.

It drives the real ServerApp strategy and the real ClientApp functions through Flower's
message types, without Ray or a SuperLink: for tests (seconds instead of a simulation start)
and for measuring what the engine itself costs. Node ``i`` gets ``partition-id=i``.

Timeouts: the nodes of a real federation run side by side, so ``timeout`` applies to each
message on its own: a reply whose ClientApp call took longer is dropped (missing), as
Flower's grids drop the replies that have not arrived when ``send_and_receive`` gives up.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterable
from uuid import uuid4

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

from fedrec_flwr.node.context_state import RESIDENT

CLIENT_APP_EXCEPTION = 3  # flwr.common.constant.ErrorCode.CLIENT_APP_RAISED_EXCEPTION


def stamp_message_id(message: Message) -> str:
    """Give ``message`` a fresh id, as a Flower grid does when it pushes one (the server
    matches each reply's ``reply_to_message_id`` to it). ``Metadata.message_id`` is a
    read-only property over ``_message_id`` with no setter; Flower's own grids
    (``InMemoryGrid.push_messages``) write that entry, and so does this one place."""
    message_id = str(uuid4())
    message.metadata.__dict__["_message_id"] = message_id
    return message_id


class LocalGrid(Grid):
    """``num_nodes`` nodes whose ClientApp runs in this process, one message at a time."""

    def __init__(
        self,
        client_app: ClientApp | Callable[[Message, Context], Message],
        run_config: dict,
        num_nodes: int,
        keep_messages: bool = False,
        node_configs: list[dict] | None = None,
    ) -> None:
        """``node_configs[i]`` (if given) is added to node ``i``'s node config (e.g. its
        ``data-path``)."""
        # Messages read their sender's identity from the process (set by Flower in a real run).
        for attribute, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 0)):
            if getattr(TaskIdentity, attribute) is None:
                setattr(TaskIdentity, attribute, value)
        self.client_app = client_app
        self.keep_messages = keep_messages
        self.contexts = {
            1000 + p: Context(
                run_id=1,
                node_id=1000 + p,
                node_config={
                    "partition-id": p,
                    "num-partitions": num_nodes,
                    RESIDENT: True,  # every message runs here: the state stays in memory
                    **(node_configs[p] if node_configs else {}),
                },
                state=RecordDict(),
                run_config=dict(run_config),
            )
            for p in range(num_nodes)
        }
        self.sent: list[Message] = []
        self.replies: list[Message] = []

    def set_run(self, run) -> None:
        pass

    @property
    def run(self):
        raise NotImplementedError("LocalGrid has no Run")

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None) -> Message:
        return Message(
            content, dst_node_id=dst_node_id, message_type=message_type, group_id=group_id
        )

    def get_node_ids(self) -> Iterable[int]:
        """Ids of the nodes (all present from the start)."""
        return list(self.contexts)

    def get_nodes(self):
        raise NotImplementedError

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        raise NotImplementedError("use send_and_receive")

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        raise NotImplementedError("use send_and_receive")

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Run the ClientApp on each message; an exception becomes an error reply, and a
        call that takes longer than ``timeout`` seconds gives no reply."""
        replies = []
        for message in messages:
            stamp_message_id(message)
            if self.keep_messages:
                self.sent.append(message)
            context = self.contexts[message.metadata.dst_node_id]
            started = time.monotonic()
            try:
                reply = self.client_app(message, context)
            except Exception as error:
                reason = f"{type(error).__name__}: {error}\n{traceback.format_exc()}"
                reply = Message(Error(code=CLIENT_APP_EXCEPTION, reason=reason), reply_to=message)
            if timeout is not None and time.monotonic() - started > timeout:
                continue  # too late: the server has stopped waiting
            replies.append(reply)
        if self.keep_messages:
            self.replies.extend(replies)
        return replies
