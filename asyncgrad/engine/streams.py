"""Streams in backward: which CUDA stream a node runs on, how gradients passed between streams are
ordered, and what the caller's streams (and an awaiting caller) wait for at the end.

NOTE [Streams in the graph]
A node on a CUDA device records the stream its forward ran on (``Node._stream``, the current
stream of its device when it was recorded) and its backward runs there: the worker makes it the
current stream before the node runs, so every kernel the node launches goes to it.
A gradient handed from a producer node to a consumer node is ordered before the consumer's
work, and summed with the gradients already waiting for the consumer on the consumer's stream:
  - producer and consumer on one device, on one stream: nothing to do, the stream orders them;
  - on one device, different streams: the consumer's stream waits for an event recorded on the
    producer's stream;
  - on different devices (the producer is a copy node, whose copy to the consumer's device was
    queued on that device's current stream): the consumer's stream waits for that stream;
  - a CPU consumer: the copy to the host already waited for the GPU.
Events order streams; the host never waits for the GPU inside a backward pass.
A graph task remembers every stream its nodes ran on, with its device: the null stream is one
object for every device, meaning the default stream of whichever device is current (See NOTE
[The null stream] in asyncgrad/backend/sim.py), so a stream is always used with its device
current and never stands for a device alone. When the graph task ends, each of the caller's
current streams (taken when the graph task was built) waits for those streams, so the caller's
later work sees the gradients, as in PyTorch. An awaiting caller that gets gradients back
(``ag.grad``) also resumes only once the GPU has finished them (See NOTE [Waiting for the GPU] in
asyncgrad/backend/cuda.py), so reading them does not block; one whose results are ``.grad``
fields resumes once they are queued, with a bound on the passes in flight (See NOTE [Passes in
flight] there).
A leaf's accumulator is a consumer like any other: it runs on the stream that was current when
it was made, at the leaf's first use in an op, and keeps that stream for the leaf's life (NOTE
[Accumulator lifetime] in graph/accumulate_grad.py), so gradients from other streams are ordered
and summed there, as torch's AccumulateGrad does.
All of this is on only in a process that has used a CUDA device (``backend.cuda.loaded``).
tests/cuda/test_stream_order.py runs each case under the simulator's ordering check, with and
without the wait or deferred free it needs (NOTE [Ordering check] in asyncgrad/backend/sim.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..backend import cuda

if TYPE_CHECKING:
    from ..graph.node import Edge, Node

__all__ = ["Launch", "Streams", "arrive", "begin", "finish", "release_later"]


class Streams:
    """A graph task's CUDA bookkeeping."""

    __slots__ = ("caller", "used")

    def __init__(self) -> None:
        # Device index -> the caller's current stream when the graph task was built.
        self.caller: dict[int, Any] = {
            i: cuda.current_stream(i) for i in range(cuda.device_count())
        }
        # Every (stream, device index) a node of the graph task ran on (See NOTE [Streams in the
        # graph]: the null stream is every device's, so the pair is the key).
        self.used: dict[tuple[Any, int], None] = {}


def begin(roots: Sequence[Edge]) -> Streams | None:
    """The stream bookkeeping of a new graph task (None in a process that never used CUDA),
    with its root nodes ordered after the caller's stream, where the root gradients were made."""
    if not cuda.loaded:
        return None
    st = Streams()
    for node, _ in roots:
        dev = node._device
        if dev is not None and dev.type == "cuda":
            idx = dev.index
            assert idx is not None
            cuda.stream_wait(node._stream, st.caller[idx], idx)
    return st


class Launch:
    """The streams (and device) a draining worker made current, put back when it stops."""

    __slots__ = ("device", "held", "last", "last_idx", "saved")

    def __init__(self) -> None:
        self.saved: dict[int, Any] = {}
        self.last: Any = None  # the stream made current last, on device last_idx
        self.last_idx = -1
        self.device: int | None = None  # the current device before the first switch
        # Arrays to keep until the kernels launched meanwhile have run, by (stream, index): one
        # event per stream when the worker stops.
        self.held: dict[tuple[Any, int], list[Any]] = {}

    def hold(self, node: Node, refs: Any) -> None:
        """Keep ``refs`` until the kernels ``node`` launches have run (See NOTE [Deferred
        frees]): an event is recorded on its stream when the worker stops."""
        dev = node._device
        assert dev is not None
        assert dev.index is not None
        key = (node._stream, dev.index)
        held = self.held.get(key)
        if held is None:
            self.held[key] = [refs]
        else:
            held.append(refs)

    def hold_saved(self, node: Node) -> None:
        """Keep what ``node`` saved for backward until its kernels have run, where it may
        come from another stream (See NOTE [Deferred frees])."""
        refs = node.releasable()
        if refs is not None:
            self.hold(node, refs)

    def enter(self, st: Streams, node: Node) -> None:
        """Make ``node``'s device and stream current (a CUDA device): the arrays its backward
        makes go there, and its kernels to that stream."""
        s = node._stream
        dev = node._device
        assert dev is not None
        assert dev.index is not None
        idx = dev.index
        st.used[s, idx] = None
        # The same stream object on another device is another stream (the null stream).
        if s is not self.last or idx != self.last_idx:
            if not cuda.side_streams and s is not cuda.default_stream(idx):
                cuda.note_side_stream()  # See NOTE [Deferred frees]
            if not cuda.single_device():
                prev_dev = cuda.use_device(idx)
                if self.device is None:
                    self.device = prev_dev
            prev = cuda.use_stream(s, idx)
            self.saved.setdefault(idx, prev)
            self.last = s
            self.last_idx = idx

    def leave(self) -> None:
        if self.held:
            for (s, idx), refs in self.held.items():
                cuda.free_after(s, idx, refs)
            self.held.clear()
        for idx, s in self.saved.items():
            cuda.use_stream(s, idx)
        self.saved.clear()
        self.last = None
        self.last_idx = -1
        if self.device is not None:
            cuda.use_device(self.device)
            self.device = None


def arrive(producer: Node, consumer: Node) -> tuple[Any, int] | None:
    """Order ``consumer``'s stream after the gradient ``producer`` hands it (See NOTE [Streams
    in the graph]); returns ``(stream, device index)`` to sum it on, or None when the stream
    that is current (the producer's) will do."""
    cdev = consumer._device
    if cdev is None or cdev.type != "cuda":
        return None
    idx = cdev.index
    assert idx is not None
    cs = consumer._stream
    # Every stream here is used on the consumer's device (the null stream: its default stream),
    # so the same object twice is the same stream, and needs no ordering.
    if producer._device is cdev:
        ps = producer._stream
        if ps is cs:
            return None
        cuda.stream_wait(cs, ps, idx)
    else:
        # The copy node's backward queued the copy on this device's current stream, ordered
        # after the producer's stream on its own device (backend.cuda.to_device).
        cuda.stream_wait(cs, cuda.current_stream(idx), idx)
    return cs, idx


def finish(st: Streams) -> list[tuple[Any, int]]:
    """The end of a graph task: the caller's streams wait for every stream its nodes ran on.
    Returns ``(event, device index)`` pairs marking the end of its GPU work."""
    events: list[tuple[Any, int]] = []
    for s, idx in st.used:
        ev = cuda.record(s, idx)
        events.append((ev, idx))
        caller = st.caller.get(idx)
        if caller is not None and caller is not s:
            cuda.wait_event(caller, ev, idx)
    cuda.prune_deferred()
    return events


def release_later(st: Streams, refs: Any) -> None:
    """Keep ``refs`` (arrays the graph task's kernels may still use) until its streams have run
    everything queued so far (See NOTE [Deferred frees])."""
    for s, idx in st.used:
        cuda.free_after(s, idx, refs)
