"""Reentrant depth: the graph task whose node is running, and where nested levels go."""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .graph_task import GraphTask

# NOTE [Reentrant depth]
# The graph task whose node is running in this task/thread. A backward started while it is set is
# reentrant: it runs at depth + 1, ahead of shallower work in the ready queues (PyTorch's order),
# and is that graph task's child (See NOTE [Cancellation links]). local_depth counts the levels
# nested since the last move; past settings.max_reentrant_depth a level moves, and local_depth
# starts again from zero:
#   - An awaited level (``await ag.grad`` in an async backward or hook) never grows a thread's
#     stack: each node that awaits runs in its own task. It moves to one of a few persistent pool
#     event loops (See NOTE [Pool loops]) and is awaited there, blocking no thread, so a chain of
#     any depth runs on a fixed set of threads and loops.
#   - A blocking level (``grad_sync``/``t.backward()`` called by a sync backward) sits on its
#     caller's stack, and that stack cannot be suspended: it moves to a pool thread (or a one-off
#     thread when all are busy, so nothing can deadlock), which is blocked until the level
#     returns. Only such nesting costs a thread per max_reentrant_depth levels; one-off threads
#     end with their level.
current_graph_task: ContextVar[GraphTask | None] = ContextVar(
    "asyncgrad_current_graph_task", default=None
)
