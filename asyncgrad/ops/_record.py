"""Recording: wrap an op's result in a Tensor and, when grad mode is on, attach its backward node.

Every forward op goes through ``make`` (or ``record`` for several outputs); this is the one place
that builds a table op's node (See NOTE [Rules are NumPy] in asyncgrad/rules).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Sequence
from typing import Any, Final

from .. import backend, dtypes
from .._build import mypyc_attr
from .._tensor import Tensor
from ..graph.anomaly_mode import anomaly_mode, forward_metadata
from ..graph.copy_slices import ViewChain
from ..graph.grad_mode import _grad_enabled, _inference
from ..graph.inference import inference_version
from ..graph.node import _next_sequence_nr as next_sequence_nr
from ..graph.node import metas, one_output_meta, outputs_meta
from ..graph.saved_tensor import SavedTensor
from ..rules import OPS, SAVES_NO_TENSOR, OpDef
from ..rules.registry import TableNode

__all__ = ["NO_PARAMS", "OPS", "as_array", "as_view", "make", "record", "record_ternary", "wrap"]

NO_PARAMS: Final[dict[str, Any]] = {}
ndarray: Final = backend.ndarray
CPU: Final = backend.CPU
device_of: Final = backend.device_of
device_and_stream: Final = backend.device_and_stream

# Bound once: every op runs these, and a module or class attribute lookup per call adds up.
new_tensor: Final = Tensor._wrap
grad_enabled: Final = _grad_enabled.get
inference_enabled: Final = _inference.get
meta_of_shape: Final = metas.get


def wrap(array: Any) -> Tensor:
    """A new tensor (no autograd state) holding ``array``; an inference tensor inside
    ``inference_mode``."""
    if type(array) is not ndarray:
        array = backend.ensure_array(array)
    t = new_tensor(array)
    if inference_enabled():
        t._vc = inference_version()
    return t


def as_array(data: Any, dtype: Any = None) -> Any:
    """An array for ``data`` (no copy when it already is one), with torch's default dtypes."""
    if isinstance(data, Tensor):
        arr = data._array
    elif backend.is_array(data):
        arr = data
    else:
        if isinstance(data, (list, tuple)) and any(isinstance(d, Tensor) for d in _flat(data)):
            data = _tensors_to_nested(data)
        arr = backend.asarray(data)
        if dtype is None and not isinstance(data, backend.generic):
            # Python floats become float32 and ints int64, as in torch.
            want = dtypes.default_dtype_of(arr.dtype)
            if want is not None:
                arr = arr.astype(want)
    if dtype is not None:
        dt = dtypes.to_dtype(dtype)
        if arr.dtype != dt:
            arr = arr.astype(dt)
    return arr


def _flat(data: Any) -> Iterator[Any]:
    for d in data:
        if isinstance(d, (list, tuple)):
            yield from _flat(d)
        else:
            yield d


def _tensors_to_nested(data: Any) -> Any:
    if isinstance(data, Tensor):
        return backend.to_device(data._array, backend.CPU)
    if isinstance(data, (list, tuple)):
        return [_tensors_to_nested(d) for d in data]
    return data


def arr(x: Any) -> Any:
    """The array of a Tensor; anything else as it is."""
    return x._array if isinstance(x, Tensor) else x


# Per op, for each mask of inputs that need gradients, the positions to save (See
# OpDef.saves_for) as a bit set (bit p: position p, where 0 is the output and i + 1 input i), in a
# tuple indexed by the mask. Recording ANDs it with the bits of the positions that hold tensors:
# most ops then learn that they save no tensor with one dict lookup, without a call. Filled on
# first use; ops with many inputs (cat, stack) get an empty table and always go through _save.
_SAVES: dict[OpDef, tuple[int, ...]] = {}
_SAVES_MAX_INPUTS: Final = 4


def _saves_table(op: OpDef) -> tuple[int, ...]:
    n = len(op.vjps)
    tbl: tuple[int, ...] = ()
    if op.multi_input is None and n <= _SAVES_MAX_INPUTS:
        tbl = tuple(builtins.sum(1 << p for p in op.saves_for(mask)) for mask in range(1 << n))
    _SAVES[op] = tbl
    return tbl


def record(
    op: OpDef,
    outs: Sequence[Tensor],
    inputs: Sequence[Any],
    params: dict[str, Any],
    arrays: Sequence[Any] | None = None,
) -> None:
    """Attach a backward node of ``op`` to ``outs`` if any tensor input requires grad.
    ``arrays``: the arrays the op read from ``inputs`` (See NOTE [Ops save what they read])."""
    edges: list[Any] = []  # Edge | None, See NOTE [Edges are plain tuples]
    saved: list[Any] = [None]  # position 0 for the output(s), then one per input
    mask = 0
    tbits = 1  # the positions in ``saved`` that hold tensors (the output's, 0, always)
    topo = 0
    bit = 1
    for x in inputs:
        if isinstance(x, Tensor):
            saved.append(None)
            tbits |= bit << 1
            e = _edge_of(x)
            edges.append(e)
            if e is None:
                bit <<= 1
                continue
            fn = e[0]
            mask |= bit
            n = fn._topological_nr
            if n >= topo:
                topo = n + 1
        else:
            edges.append(None)
            saved.append(x)  # constants are kept for the rules
        bit <<= 1
    if not mask:
        return
    if len(outs) == 1:
        _attach(op, outs[0], edges, topo, saved, mask, tbits, inputs, params, arrays)
        return
    node = TableNode()  # See NOTE [Nodes are filled in as TableNode]
    node._init_node(edges)
    if anomaly_mode():  # See NOTE [Anomaly mode is a context variable]
        node._metadata = forward_metadata()
    node._op = op
    node._params = params
    a = outs[0]._array
    node._input_meta = outputs_meta(
        tuple(one_output_meta(o._array.shape, o._array.dtype)[0] for o in outs)
    )
    if type(a) is ndarray:
        node._device = CPU
    else:
        node._device, node._stream = device_and_stream(a)
    node._spos = _save(_keep(op, mask, tbits), saved, outs, inputs, arrays)
    node._saved = saved
    node.__class__ = op.node_cls
    i = 0
    for o in outs:
        o._grad_fn = node
        o._output_nr = i
        i += 1


# NOTE [Fewer objects for the collector]
# A chain of ops keeps every tensor and node alive until the backward, and CPython's cyclic
# garbage collector scans each live container object several times as the graph grows (each full
# collection runs when the objects that survived since the last one reach a quarter of the
# total): several hundred machine instructions per object over a forward. Recording therefore
# creates few long-lived containers per op: a node's ``_saved`` is a tuple when it holds no tensor
# (a tuple of numbers and None is untracked at its first collection), and nodes of one shape and
# dtype share their ``_input_meta`` (See NOTE [Shared input metadata] in graph/node.py). A leaf's
# edge to its accumulator is made once and shared by every node that consumes the leaf (a
# model's parameters, in every request), accumulators share their locks (See NOTE [Accumulation
# locks]), a graph task makes its rarely used containers on first use, and an awaited pass keeps
# neither its call's argument lists nor its finished preparation while it waits. The young
# generation runs after every 700 new container objects, net, and the middle and full ones
# after so many young ones: what counts is what each request creates and keeps. A small MLP's
# request now creates 42 (was 62) for its forward graph and 23 for its pending pass, and a
# burst of 2,000 such requests sets off about 160 young collections (was 220) and 14 middle
# ones (was 20), with one or two full collections where it had two.
_NO_CONSTANTS_1: Final = (None, None)
_NO_CONSTANTS_3: Final = (None, None, None, None)
_OUTPUT_ONLY: Final = (0,)


# NOTE [Nodes are filled in as TableNode]
# Each op has its own node class (MulBackward0, ...), so the attribute stores that fill in a new
# node would see a different class from one op to the next, and CPython's specialised
# slot-store instructions would keep falling back to the generic path (about 170 machine
# instructions a store instead of a few, and a node takes eleven). A node is therefore made as a
# TableNode (the op classes' common base), filled in, and given its op's class last: the op
# classes add no slots, so the assignment is allowed, and it costs less than the stores it keeps
# specialised. (Where this module is compiled, the stores go straight to the node's fields.)


# NOTE [Ops save what they read]
# An op reads each input's array once, when it starts, and computes from that; recording comes
# after. In between, an optimizer step on another thread may give a parameter new values in a
# new array (See NOTE [Serving while training] in asyncgrad/optim/optimizers.py), and a node that
# saved what the tensor holds by then would backpropagate through weights its forward never
# used. So an op passes the arrays it read (``make``'s and the recorders' ``arrays``), and the
# saved tensor keeps those, with the version counter they were published with. An op that
# passes none saves what its inputs hold when it records: right when nothing steps them meanwhile.
# Not covered: a custom Function (autograd/function.py) saves what ``save_for_backward`` named as
# its forward returns, and its forward reads its inputs as it goes, so a step on another thread
# during that forward may leave it other weights than it read (as in torch).


# NOTE [Edges are plain tuples]
# Recording builds each edge as a plain ``(node, input_nr)`` tuple rather than ``Edge(...)``: the
# namedtuple's constructor is a Python-level call (about 2,500 machine instructions, as much as
# the rest of a small op's recording), and the engine indexes edges, which CPython does faster on
# an exact tuple. A plain tuple compares equal to the Edge with the same fields.


def _edge_of(x: Tensor) -> Any:
    """The edge a node recorded now takes to tensor ``x`` (None: x needs no gradient)."""
    fn = x._grad_fn
    if fn is not None and x._base is None:
        return (fn, x._output_nr)  # See NOTE [Edges are plain tuples]
    if x._base is None:
        if not x._requires_grad:
            return None
        m = x._meta
        if m is not None:
            # A leaf's, made once and shared. Typed object: compiled code would box a new tuple
            # from a value narrowed to a fixed-length tuple type (See NOTE [Compiled modules]).
            e: object = m.grad_edge
            if e is not None:
                return e
    return x._edge()


def record_unary(op: OpDef, t: Tensor, x: Tensor, params: dict[str, Any], xa: Any = None) -> None:
    """``record`` for one tensor input and one output, the common case, without the loops;
    ``xa``: the array the op read from ``x`` (See NOTE [Ops save what they read])."""
    e = _edge_of(x)
    if e is None:
        return
    fn = e[0]
    arrays = None if xa is None else (xa,)
    _attach(op, t, [e], fn._topological_nr + 1, _NO_CONSTANTS_1, 1, 3, (x,), params, arrays)


def record_scalar(op: OpDef, t: Tensor, x: Tensor, c: Any, xa: Any = None) -> None:
    """``record_binary`` for a tensor and a constant second operand (``y * 0.5``)."""
    e = _edge_of(x)
    if e is None:
        return
    fn = e[0]
    arrays = None if xa is None else (xa, c)
    _attach(
        op, t, [e, None], fn._topological_nr + 1, (None, None, c), 1, 3, (x, c), NO_PARAMS, arrays
    )


def record_binary(
    op: OpDef, t: Tensor, x: Any, y: Any, arrays: Sequence[Any] | None = None
) -> None:
    """``record`` for two inputs (tensors or constants) and one output, without the loops;
    ``arrays``: the op's operands as it read them (See NOTE [Ops save what they read])."""
    if isinstance(x, Tensor):
        ex = _edge_of(x)
        cx = None
        tbits = 3
    else:
        ex = None
        cx = x  # constants are kept for the rules
        tbits = 1
    if isinstance(y, Tensor):
        ey = _edge_of(y)
        cy = None
        tbits |= 4
    else:
        ey = None
        cy = y
    if ex is None:
        if ey is None:
            return
        mask = 2
        topo = ey[0]._topological_nr + 1
    elif ey is None:
        mask = 1
        topo = ex[0]._topological_nr + 1
    else:
        mask = 3
        topo = builtins.max(ex[0]._topological_nr, ey[0]._topological_nr) + 1
    _attach(op, t, [ex, ey], topo, (None, cx, cy), mask, tbits, (x, y), NO_PARAMS, arrays)


def record_ternary(
    op: OpDef, t: Tensor, x: Tensor, y: Tensor, z: Tensor, arrays: Sequence[Any] | None = None
) -> None:
    """``record`` for three tensor inputs and one output (``linear`` with a bias), without
    the loops."""
    ex = _edge_of(x)
    ey = _edge_of(y)
    ez = _edge_of(z)
    mask = 0
    topo = 0
    if ex is not None:
        mask = 1
        topo = ex[0]._topological_nr
    if ey is not None:
        mask |= 2
        n = ey[0]._topological_nr
        if n > topo:
            topo = n
    if ez is not None:
        mask |= 4
        n = ez[0]._topological_nr
        if n > topo:
            topo = n
    if mask:
        _attach(
            op, t, [ex, ey, ez], topo + 1, _NO_CONSTANTS_3, mask, 15, (x, y, z), NO_PARAMS, arrays
        )


def _attach(
    op: OpDef,
    t: Tensor,
    edges: list[Any],
    topo: int,
    saved: Sequence[Any],
    mask: int,
    tbits: int,
    inputs: Sequence[Any],
    params: dict[str, Any],
    arrays: Sequence[Any] | None,
) -> None:
    """Make the backward node of a one-output op and make it ``t``'s grad_fn. ``topo`` is one
    more than the largest topological number of the nodes in ``edges``; ``saved`` holds the
    constant inputs, None elsewhere; ``tbits`` marks the positions of the tensors (See _SAVES).
    """
    node = TableNode()  # See NOTE [Nodes are filled in as TableNode]
    # Node._init_node's fields, set here without its call and its loop over the edges (the
    # recorders have the topological number already).
    node._next_edges = edges
    node._topological_nr = topo
    node._sequence_nr = next_sequence_nr()
    node._hooks = None
    # In anomaly mode, where the forward made it (See NOTE [Anomaly mode is a context variable]).
    node._metadata = forward_metadata() if anomaly_mode() else None
    node._op = op
    node._params = params
    a = t._array
    # one_output_meta's lookup, inline (See NOTE [Shared input metadata] in graph/node.py).
    shape = a.shape
    dt = a.dtype
    m = meta_of_shape(shape)
    node._input_meta = m if m is not None and m[0][1] is dt else one_output_meta(shape, dt)
    if type(a) is ndarray:
        node._device = CPU
    else:
        node._device, node._stream = device_and_stream(a)
    tbl = _SAVES.get(op)
    if tbl is None:
        tbl = _saves_table(op)
    keep = tbl[mask] & tbits if mask < len(tbl) else _keep(op, mask, tbits)
    if not keep:
        # No tensor to save, only the constants already in ``saved``, which is kept as it is: a
        # tuple of untracked objects, which the garbage collector stops scanning (See NOTE
        # [Fewer objects for the collector]).
        # A constant that a rule reads is one torch saves (See NOTE [Saved values that are not
        # tensors]): freed after one backward.
        node._spos = SAVES_NO_TENSOR if mask < len(tbl) and tbl[mask] else ()
        node._saved = saved
    elif keep == 1:  # the output alone (exp, tanh, sigmoid, ...)
        values = list(saved)
        values[0] = SavedTensor(t, True)
        node._spos = _OUTPUT_ONLY
        node._saved = values
    else:
        values = list(saved)
        node._spos = _save(keep, values, (t,), inputs, arrays)
        node._saved = values
    node.__class__ = op.node_cls
    t._grad_fn = node
    t._output_nr = 0


def _save(
    keep: int,
    saved: list[Any],
    outs: Sequence[Tensor],
    inputs: Sequence[Any],
    arrays: Sequence[Any] | None,
) -> tuple[int, ...]:
    """Save the tensors at the positions in bit set ``keep`` (See _SAVES) into ``saved``; return
    those positions (only these are released after backward). ``arrays``: the arrays the op
    read from ``inputs``, saved in place of what the tensors hold now."""
    spos = _POSITIONS.get(keep)
    if spos is None:
        spos = _POSITIONS[keep] = tuple(p for p in range(keep.bit_length()) if keep >> p & 1)
    for pos in spos:
        if pos == 0:
            if len(outs) == 1:
                saved[0] = SavedTensor(outs[0], True)
            else:
                saved[0] = tuple(SavedTensor(o, True) for o in outs)
            continue
        x = inputs[pos - 1]
        if type(x._vc) is not list:  # See NOTE [Inference tensors]
            raise RuntimeError(
                "Inference tensors cannot be saved for backward. Please do not use Tensors "
                "created in inference mode in computation tracked by autograd. To work around "
                "this, you can make a clone to get a normal tensor and use it in autograd, or "
                "use `torch.no_grad()` instead of `torch.inference_mode()`. (The op's input "
                f"{pos - 1}, of shape {list(x._array.shape)}, is an inference tensor.)"
            )
        saved[pos] = SavedTensor(x, False, None if arrays is None else arrays[pos - 1])
    return spos


# The positions in each bit set of positions to save, made on first use (a few dozen sets).
_POSITIONS: dict[int, tuple[int, ...]] = {}


def _keep(op: OpDef, mask: int, tbits: int) -> int:
    """The positions to save (See _SAVES) when the inputs in ``mask`` need gradients, keeping
    only those in ``tbits`` (the ones that hold tensors)."""
    tbl = _SAVES.get(op)
    if tbl is None:
        tbl = _saves_table(op)
    if mask < len(tbl):
        return tbl[mask] & tbits
    return builtins.sum(1 << p for p in op.saves_for(mask)) & tbits


def make(
    op: OpDef,
    out: Any,
    inputs: Sequence[Any],
    params: dict[str, Any] = NO_PARAMS,
    arrays: Sequence[Any] | None = None,
) -> Tensor:
    """The tensor of a one-output op's result ``out``, recorded when grad mode is on;
    ``arrays``: the arrays the op computed ``out`` from, one per input (See NOTE [Ops save what
    they read])."""
    if type(out) is not ndarray:
        out = backend.ensure_array(out)
    t = new_tensor(out)
    if inference_enabled():
        t._vc = inference_version()
    if grad_enabled():
        if len(inputs) == 1 and isinstance(inputs[0], Tensor):
            record_unary(op, t, inputs[0], params, None if arrays is None else arrays[0])
        else:
            record(op, (t,), inputs, params, arrays)
    return t


def check_devices(name: str, xa: Any, ya: Any) -> None:
    da, db = backend.device_of(xa), backend.device_of(ya)
    if da is not db:
        raise RuntimeError(
            f"Expected all tensors to be on the same device, but found at least two devices, "
            f"{da} and {db}! (when checking arguments for {name})"
        )


def as_view(out: Tensor, x: Tensor, name: str, params: dict[str, Any]) -> Tensor:
    """Mark ``out`` a view of ``x`` (made by view op ``name``): it shares x's base and version
    counter, and can replay its chain of view ops (See NOTE [View grad_fn regeneration])."""
    base = x._base if x._base is not None else x
    out._base = base
    out._vc = x._vc
    m = out._get_meta()
    xm = x._meta
    chain: ViewChain = (
        xm.view_chain if (x._base is not None and xm is not None and xm.view_chain) else ()
    )
    new: ViewChain = (*chain, (name, params))
    if not grad_enabled():  # See NOTE [Views made under no_grad]
        new = InferenceModeView(new) if inference_enabled() else NoGradView(new)
    elif isinstance(chain, NoGradView):
        new = (
            ViewOfInferenceModeView(new)
            if isinstance(chain, (InferenceModeView, ViewOfInferenceModeView))
            else ViewOfNoGradView(new)
        )
    m.view_chain = new
    m.view_version = x._vc[0]
    if type(x._vc) is not list:  # See NOTE [Inference tensors]
        # A view of an inference tensor is one, outside the graph (as torch's).
        out._grad_fn = None
        out._output_nr = 0
    return out


# NOTE [Views made under no_grad]
# As torch: a view made under no_grad (or a view of such a view) may not be modified in place
# while grad mode is on if that in-place op would be recorded (its base, or the value written,
# requires grad): whether the write should reach the base's gradient is ambiguous. The view's
# chain of view ops says so by its type, a tuple subclass, so that ordinary views pay nothing:
# ``NoGradView`` for a view made under no_grad, ``ViewOfNoGradView`` for a view of one made
# with grad mode on. ``check_no_grad_view`` (ops/inplace.py) raises torch's errors. (Tuple
# subclasses stay Python classes where the module is compiled: See NOTE [Compiled modules].)
@mypyc_attr(native_class=False)
class NoGradView(tuple[tuple[str, dict[str, Any]], ...]):
    __slots__ = ()


@mypyc_attr(native_class=False)
class ViewOfNoGradView(NoGradView):
    __slots__ = ()


# Made under inference mode, of a normal tensor: the same rule, with torch's words for it.
@mypyc_attr(native_class=False)
class InferenceModeView(NoGradView):
    __slots__ = ()


@mypyc_attr(native_class=False)
class ViewOfInferenceModeView(ViewOfNoGradView):
    __slots__ = ()
