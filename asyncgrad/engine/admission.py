"""Admission: how many top-level graph tasks may run at once on one event loop.

NOTE [Admission]
``configure(max_running=N)`` caps the graph tasks that run at once on each event loop, so a
burst of requests cannot fill memory with the input buffers of thousands of backward passes in
flight. The rest wait, before they are even prepared, in priority order (then arrival order);
``stats()`` counts them as ``waiting``. A waiting caller that is cancelled leaves the line,
never starts, and counts as cancelled. Nested backward passes (started by a node, a hook or a
callback of a running graph task) are never held back: their parent holds a place already and
waits for them, so holding them back could deadlock. The default is no cap.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import weakref
from typing import Final

from . import metrics
from .reentrant import config

_arrivals: Final = itertools.count()


class Admission:
    __slots__ = ("running", "waiters")

    def __init__(self) -> None:
        self.running = 0
        self.waiters: list[tuple[int, int, asyncio.Future[None]]] = []


_per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Admission] = (
    weakref.WeakKeyDictionary()
)


def of(loop: asyncio.AbstractEventLoop) -> Admission:
    adm = _per_loop.get(loop)
    if adm is None:
        adm = _per_loop[loop] = Admission()
    return adm


def try_enter(adm: Admission) -> bool:
    """Take a place among the graph tasks running on its loop if one is free and nobody waits
    for one; False (nothing changed) otherwise, when the caller awaits ``enter``. The caller
    must call ``leave`` once its graph task has ended."""
    cap = config.max_running
    if cap is None or (adm.running < cap and not adm.waiters):
        adm.running += 1
        return True
    return False


async def enter(loop: asyncio.AbstractEventLoop, adm: Admission, priority: int) -> None:
    """Take a place among the graph tasks running on ``loop``, waiting for one if the cap is
    reached. The caller must call ``leave`` once its graph task has ended."""
    if try_enter(adm):
        return
    fut: asyncio.Future[None] = loop.create_future()
    heapq.heappush(adm.waiters, (-priority, next(_arrivals), fut))
    st = metrics.of(loop)
    st.waiting += 1
    try:
        await fut  # `leave` counts this caller as running when it wakes it
    except asyncio.CancelledError:
        if fut.done() and not fut.cancelled():
            leave(adm)  # admitted just as it was cancelled: pass the place on
        st.cancelled += 1  # a graph task that never started
        raise
    finally:
        st.waiting -= 1


def leave(adm: Admission) -> None:
    """A graph task that ``enter`` admitted has ended: admit the next waiters that fit."""
    adm.running -= 1
    waiters = adm.waiters
    cap = config.max_running
    while waiters and (cap is None or adm.running < cap):
        fut = heapq.heappop(waiters)[2]
        if fut.done():  # its caller was cancelled while waiting
            continue
        adm.running += 1
        fut.set_result(None)
