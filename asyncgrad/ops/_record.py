"""Recording: wrap an op's result in a Tensor and, when grad mode is on, attach its backward node.

Every forward op goes through ``make`` (or ``record`` for several outputs); this is the one place
that builds a table op's node (See NOTE [Rules are NumPy] in asyncgrad/rules).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Final

from .. import backend, dtypes
from .._tensor import Tensor
from ..graph.copy_slices import ViewChain
from ..graph.grad_mode import _grad_enabled, _inference
from ..graph.node import Edge
from ..graph.saved_tensor import SavedTensor
from ..rules import OPS, FunctionNode, OpDef

__all__ = ["NO_PARAMS", "OPS", "as_array", "as_view", "make", "record", "wrap"]

NO_PARAMS: Final[dict[str, Any]] = {}
ndarray: Final = backend.ndarray


def wrap(array: Any) -> Tensor:
    """A new tensor (no autograd state) holding ``array``; an inference tensor inside
    ``inference_mode``."""
    if type(array) is not ndarray:
        array = backend.ensure_array(array)
    t = Tensor._wrap(array)
    if _inference.get():
        t._get_meta().inference = True
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


def record(
    op: OpDef, outs: Sequence[Tensor], inputs: Sequence[Any], params: dict[str, Any]
) -> None:
    """Attach a backward node of ``op`` to ``outs`` if any tensor input requires grad."""
    edges: list[Edge | None] = []
    saved: list[Any] = [None]
    mask = 0
    bit = 1
    for x in inputs:
        if isinstance(x, Tensor):
            fn = x._grad_fn
            if x._base is not None or (fn is None and x._requires_grad):
                e = x._edge()
            elif fn is not None:
                e = Edge(fn, x._output_nr)
            else:
                e = None
            if e is not None:
                mask |= bit
            edges.append(e)
            saved.append(None)
        else:
            edges.append(None)
            saved.append(x)  # constants are kept for the rules
        bit <<= 1
    if not mask:
        return
    node: FunctionNode = object.__new__(op.node_cls)
    node._init_node(edges)
    node._op = op
    node._params = params
    a = outs[0]._array
    if len(outs) == 1:
        node._input_meta = ((a.shape, a.dtype),)
    else:
        node._input_meta = tuple((o._array.shape, o._array.dtype) for o in outs)
    node._device = backend.CPU if type(a) is ndarray else backend.device_of(a)
    tensor_pos: list[int] = []
    for pos in op.saves_for(mask):
        if pos == 0:
            if op.num_outputs == 1:
                saved[0] = SavedTensor(outs[0], True)
            else:
                saved[0] = tuple(SavedTensor(o, True) for o in outs)
            tensor_pos.append(0)
        else:
            x = inputs[pos - 1]
            if isinstance(x, Tensor):
                tensor_pos.append(pos)
                if x._meta is not None and x._meta.inference:
                    raise RuntimeError(
                        "Inference tensors cannot be saved for backward. To work around you can "
                        "make a clone to get a normal tensor and use it in autograd."
                    )
                saved[pos] = SavedTensor(x, False)
    node._spos = tuple(tensor_pos)  # only these are released after backward
    node._saved = saved
    i = 0
    for o in outs:
        o._grad_fn = node
        o._output_nr = i
        i += 1


def make(op: OpDef, out: Any, inputs: Sequence[Any], params: dict[str, Any] = NO_PARAMS) -> Tensor:
    """The tensor of a one-output op's result ``out``, recorded when grad mode is on."""
    t = wrap(out)
    if _grad_enabled.get():
        record(op, (t,), inputs, params)
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
    m.view_chain = (*chain, (name, params))
    m.view_version = x._vc[0]
    return out
