"""The registry of the rule table: ``defvjp``, ``OpDef`` and ``FunctionNode``, the node that runs
a table op's rules.

# NOTE [Rules are NumPy]
# Every rule is written with array operators and NumPy's functions, reached as ``backend.xp``.
# During an ordinary backward the engine passes arrays of the gradient's device, so a rule costs
# exactly its array calls: NumPy's functions run on ``numpy.ndarray`` and hand a ``cupy.ndarray``
# to CuPy through NumPy's dispatch protocols. Under ``create_graph=True`` the engine passes Tensors
# instead; Tensor implements ``__array_ufunc__`` and ``__array_function__``, so the same rule runs
# asyncgrad ops and records a differentiable graph. A rule that allocates does so through the
# array module of its inputs (``xp.zeros_like(g)``, ``backend.namespace(g)``), never from a bare
# shape. Broadcasting is undone once, after the rule (``FunctionNode.apply``), never inside one.

# NOTE [Special values]
# Rules give torch's gradients at NaN, +-inf, -0 and ties (tests/autograd/test_special_values.py
# compares every op with torch). Where torch selects (``where``, ``masked_fill``, scatter), a
# rule selects too, with np.where or _masked: multiplying by a 0/1 mask turns an inf or NaN
# gradient into NaN where torch gives 0. Rules run with NumPy's floating-point warnings off
# (NOTE [Silent floating point] in asyncgrad/backend).
"""

from __future__ import annotations

import dis
import inspect
import math
from collections.abc import Callable
from typing import Any, ClassVar, Final, cast

from .. import backend
from .._build import mypyc_attr
from ..backend import xp
from ..graph.node import ELEMENT_PASS, Node, largest_shape
from ..graph.saved_tensor import FREED, SavedTensor, raise_freed, unpack_saved

__all__ = [
    "OPS",
    "SAVES_NO_TENSOR",
    "FunctionNode",
    "OpDef",
    "TableNode",
    "defvjp",
    "keeps_for_backward",
    "set_costs",
    "sum_to",
]

Rule = Callable[..., Any]
# Final: where this module is compiled, read without a lookup in the module's namespace.
_FREED: Final = FREED


class OpDef:
    """One op of the table: its rules, what they read, and its backward node class."""

    __slots__ = (
        "_save_cache",
        "into",
        "multi_input",
        "name",
        "node_cls",
        "num_outputs",
        "save",
        "uses",
        "vjps",
    )

    def __init__(
        self,
        name: str,
        vjps: tuple[Rule | None, ...],
        save: tuple[int, ...],
        uses: tuple[tuple[int, ...], ...],
        num_outputs: int,
        multi_input: Rule | None,
    ) -> None:
        self.name = name
        self.vjps = vjps
        self.save = save  # positions in (ans, input0, input1, ...) that some rule reads
        self.uses = uses  # per input: the positions its rule reads
        self.num_outputs = num_outputs
        self.multi_input = multi_input
        self.into: Rule | None = None  # See NOTE [Gradients overwritten in place]
        self._save_cache: dict[int, tuple[int, ...]] = {}
        cls_name = "".join(p.capitalize() for p in name.split("_")) + "Backward0"
        self.node_cls: type[FunctionNode] = type(cls_name, (TableNode,), {"__slots__": ()})

    def saves_for(self, mask: int) -> tuple[int, ...]:
        """The positions to save when the inputs in bitmask ``mask`` need gradients: only what
        their rules read (``x * y`` keeps ``x`` only if ``y`` requires grad, as torch does)."""
        got = self._save_cache.get(mask)
        if got is None:
            if self.multi_input is not None:
                got = self.save
            else:
                pos: set[int] = set()
                for i, u in enumerate(self.uses):
                    if mask >> i & 1:
                        pos.update(u)
                got = tuple(sorted(pos))
            self._save_cache[mask] = got
        return got

    def __repr__(self) -> str:
        return f"OpDef({self.name!r})"


OPS: dict[str, OpDef] = {}


def _reads(rule: Rule, names: list[str]) -> set[str]:
    """The parameters of ``rule`` that its body reads (local loads, or captured by a closure)."""
    code = rule.__code__
    used = set(code.co_cellvars)
    for ins in dis.get_instructions(code):
        if ins.opname.startswith(("LOAD_FAST", "LOAD_DEREF", "LOAD_CLOSURE")):
            v = ins.argval
            used.update(v if isinstance(v, tuple) else (v,))
    return used & set(names)


def defvjp(
    name: str,
    *vjps: Rule | None,
    save: str = "",
    outputs: int = 1,
    all_inputs: Rule | None = None,
    into: Rule | None = None,
) -> OpDef:
    """Register the rules of op ``name``.

    Each rule is ``rule(g, ans, *inputs, **params) -> grad`` for one input (``None``: no gradient).
    ``save`` names the values the rules read ("ans" and the input names of the rule signature);
    the others reach the rules as ``None``, and registration fails if a rule reads a value that
    ``save`` does not name. ``all_inputs`` is one rule for ops with any number of inputs (``cat``,
    ``stack``): it returns the list of all input gradients.
    """
    first = next((v for v in (*vjps, all_inputs) if v is not None), None)
    if first is None:
        raise ValueError(f"{name}: at least one rule is needed")
    params = [
        p.name
        for p in inspect.signature(first).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if all_inputs is not None:
        positions = {"ans": 0, "inputs": 1}
    else:
        if params[:2] != ["g", "ans"]:
            raise ValueError(f"{name}: rules take (g, ans, *inputs, **params), got {params}")
        positions = {n: i for i, n in enumerate(params[1:])}
    save_names = save.split()
    for n in save_names:
        if n not in positions:
            raise ValueError(f"{name}: cannot save {n!r}; rule arguments are {params}")
    uses: list[tuple[int, ...]] = []
    for i, v in enumerate(vjps):
        if v is None:
            uses.append(())
            continue
        read = _reads(v, list(positions))
        missing = read - set(save_names)
        if missing:
            raise ValueError(f"{name}: the rule for input {i} reads {sorted(missing)} not in save=")
        uses.append(tuple(sorted(positions[n] for n in read)))
    save_pos = tuple(sorted(positions[n] for n in save_names))
    op = OpDef(name, tuple(vjps), save_pos, tuple(uses), outputs, all_inputs)
    if into is not None:
        if outputs != 1 or len(vjps) != 1 or all_inputs is not None:
            raise ValueError(f"{name}: an in-place rule is for ops of one input and one output")
        missing = _reads(into, list(positions)) - set(save_names)
        if missing:
            raise ValueError(f"{name}: the in-place rule reads {sorted(missing)} not in save=")
        op.into = into
    OPS[name] = op
    return op


def sum_to(g: Any, shape: tuple[int, ...]) -> Any:
    """Sum ``g`` over the axes that broadcasting added to reach ``g.shape`` from ``shape``."""
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    # An array's own method skips NumPy's Python-level wrapper of np.sum (a Tensor's, under
    # create_graph, takes torch's arguments: np.sum dispatches it).
    method = backend.is_array(g)
    if lead:
        axis = tuple(range(lead))
        g = g.sum(axis=axis) if method else xp.sum(g, axis=axis)  # a fresh array, not a view
    axes = tuple(i for i, s in enumerate(shape) if s == 1 and g.shape[i] != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True) if method else xp.sum(g, axis=axes, keepdims=True)
    return g


def _fit(g: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    if g.shape != shape:
        try:
            g = sum_to(g, shape)
        except ValueError:
            raise RuntimeError(
                f"gradient of shape {tuple(g.shape)} cannot be reduced to shape {shape}"
            ) from None
    if g.dtype != dtype and dtype is not None:
        g = g.astype(dtype) if hasattr(g, "astype") else g.to(dtype)  # Tensor: create_graph
    return g


def mark_heavy(op: OpDef, inner: Callable[[Any, Any], int]) -> None:
    """Mark a matmul-like op of two or more inputs whose backward may be large enough to leave
    the event loop (See NOTE [Large nodes] in asyncgrad/engine/worker.py). ``inner(a0, a1)``
    gives the contracted size from the saved arrays of the first two inputs (None where that
    input was not saved, never both); each gradient the node computes costs about (gradient
    size) x (inner size) multiply-adds."""

    def work(node: Node, grads: list[Any]) -> int:
        # Runs for every such node an awaited pass reaches: no shape tuples, no len().
        g = grads[0]
        saved = node._saved  # type: ignore[attr-defined]
        if g is None or saved is _FREED:
            return 0
        a, b = saved[1], saved[2]
        a = a.array if type(a) is SavedTensor else None
        b = b.array if type(b) is SavedTensor else None
        if a is None and b is None:
            return 0
        size = g.size
        if type(size) is not int:  # a Tensor (under create_graph), whose size is a method
            size = g.numel()
        edges = node._next_edges
        return size * inner(a, b) * ((edges[0] is not None) + (edges[1] is not None))  # type: ignore[no-any-return]

    cls = op.node_cls
    cls._work = staticmethod(work)
    cls._special = True


def _cubic_work(node: Node, grads: list[Any]) -> float:
    """A decomposition's backward: ``_cost`` times (matrix elements) x (the smaller side) per
    matrix of its largest input or output, a few matrix products' worth."""
    shape = largest_shape(node)
    if len(shape) < 2:
        return 0.0
    return math.prod(shape) * min(shape[-2], shape[-1]) * node._cost


def set_costs(
    costs: dict[str, float], *, special: tuple[str, ...] = (), cubic: dict[str, float] | None = None
) -> None:
    """Give the table's ops their work estimates (See NOTE [Work estimates] in graph/node.py):
    ``costs[name]`` multiply-adds per element of the largest array the node reads or writes;
    the ops in ``special``, whose gradient may be small while that array is large, are checked
    in every awaited pass; ``cubic[name]`` is a decomposition's cost per (elements x side)."""
    for name, cost in costs.items():
        OPS[name].node_cls._cost = cost
    for name in special:
        OPS[name].node_cls._special = True
    for name, cost in (cubic or {}).items():
        cls = OPS[name].node_cls
        cls._cost = cost
        cls._work = staticmethod(_cubic_work)
        cls._special = True


# NOTE [Saved values that are not tensors]
# torch frees what a node saved once a backward through it has run (without retain_graph), and a
# second backward through that node raises "Trying to backward through the graph a second time".
# Beside tensors, torch's nodes save a Python number that a rule reads as a tensor (the ``2.0``
# of ``x * 2.0``, ``x / 2.0``, the condition of ``where``) and the index tensors of indexing
# ops (advanced ``getitem``, ``index_put``, ``gather``, ``sort``, ``max(dim)``, ``max_pool2d``,
# padding but for constant), and CopySlices gives up its node (an in-place op on a view); nodes
# that keep only sizes or nothing (``x + 1``, ``sum``, a slice, ``flip``) never raise. Here such
# values are constants or parameters, kept in the node but never unpacked: ``_spos`` is then
# ``SAVES_NO_TENSOR``, which is empty (no SavedTensor to unpack) yet marks the node as holding
# values for its backward, so that ``release_variables`` frees them and a second backward
# raises as torch's does. Recording sets it for a constant that a rule reads; the indexing ops
# set it with ``keeps_for_backward``.
@mypyc_attr(native_class=False)  # a tuple subclass (See NOTE [Compiled modules])
class _SavesNoTensor(tuple[int, ...]):
    __slots__ = ()


SAVES_NO_TENSOR: Final[tuple[int, ...]] = _SavesNoTensor()


def keeps_for_backward(node: Node | None, keeps: bool = True) -> None:
    """Mark a table op's node as holding values (index arrays) for its backward, freed after
    one backward as torch frees its saved index tensors; or, with ``keeps=False``, as holding
    none where torch's node saves none (See NOTE [Saved values that are not tensors])."""
    if isinstance(node, FunctionNode) and not node._spos:
        node._spos = SAVES_NO_TENSOR if keeps else ()


# NOTE [Table nodes are called directly]
# The table ops' node classes (``OpDef.node_cls``, through ``TableNode``) are Python classes that
# add flags only: none overrides FunctionNode's methods. The device worker relies on that and
# calls ``FunctionNode.apply`` and ``release_variables`` on their nodes directly: where the
# engine is compiled, ``node.apply(...)`` on a node of a Python class looks the method up on
# that class and calls it through Python's calling convention, which cost about a tenth of a
# chain's node. So no subclass of FunctionNode overrides them
# (tests/engine/test_compiled_traps.py checks every one).
@mypyc_attr(allow_interpreted_subclasses=True)  # each op's node class subclasses it
# NOTE [Gradients overwritten in place]
# A rule that masks its gradient (relu's: 0 where the output is 0) may write the mask into the
# gradient it gets instead of into a new array of the same size, where nothing else can see that
# gradient: its op's ``into`` rule (``defvjp(..., into=)``). FunctionNode.apply calls it when not
# building a graph and the engine's list of the node's gradients holds the only reference to the
# array (``backend.sole_in``: checked by reference count before apply takes one itself, and the
# array owns its memory). Whoever else holds it (another edge's buffer, a hook's arguments, a
# retained or captured gradient, the caller's ``gradient=``, a CUDA node of another stream that
# has yet to run: See NOTE [Deferred frees] in asyncgrad/backend/cuda.py) is a reference, and
# the ordinary rule runs. On one stream, kernels that read the array before run before the write.
class FunctionNode(Node):
    """Backward node of a table op; ``OpDef.node_cls`` subclasses it to carry the torch name.

    ``_saved[p]`` for p in (ans, input0, input1, ...): a SavedTensor at the positions in
    ``_spos``, the value itself for non-tensor inputs (constants), else None.
    """

    __slots__ = ("_op", "_params", "_saved", "_spos")

    # An op missing from the table of costs (asyncgrad/rules/table.py) counts two passes.
    _cost: ClassVar[float] = 2 * ELEMENT_PASS
    _op: OpDef
    _saved: Any
    _spos: tuple[int, ...]
    _params: dict[str, Any]

    def apply(self, grads: list[Any], needed: list[bool] | None, create: bool) -> list[Any]:
        saved = self._saved
        if saved is _FREED:
            raise_freed(self)
        op = self._op
        into = op.into
        if into is not None and (create or not backend.sole_in(grads, 0)):
            into = None  # before this frame holds the gradient: See NOTE [Gradients ...]
        edges = self._next_edges
        if op.num_outputs == 1:
            g = grads[0]
            if g is None:
                return [None] * len(edges)
        else:  # multi-output: the rule gets the list, None where no gradient arrived
            if all(x is None for x in grads):
                return [None] * len(edges)
            g = grads
        spos = self._spos
        if spos:
            vals = saved.copy()
            for p in spos:
                sv = vals[p]
                if create or type(sv) is tuple:
                    vals[p] = unpack_saved(sv, self, create)
                else:
                    if sv.vc[0] != sv.version:
                        sv.check(self)
                    vals[p] = sv.array
        else:
            vals = saved
        params = self._params
        out: list[Any] = [None] * len(edges)
        if op.multi_input is not None:
            res = op.multi_input(g, vals[0], vals[1:], **params)
            i = 0
            for e in edges:
                r = res[i]
                if e is not None and r is not None and (needed is None or needed[i]):
                    shape, dtype = e[0]._input_meta[e[1]]
                    if r.shape != shape or r.dtype != dtype:
                        r = _fit(r, shape, dtype)
                    if not shape and not create:
                        # NOTE [0-d gradients]: NumPy arithmetic on 0-d arrays returns scalars;
                        # gradients (and .grad) must stay arrays.
                        r = backend.ensure_array(r)
                    out[i] = r
                i += 1
            return out
        vjps = op.vjps
        n = len(vals)
        i = 0
        for e in edges:
            if e is not None and (needed is None or needed[i]):
                # An input whose edge exists has a rule (defvjp gives None only to inputs that
                # cannot require grad, like where's condition). The common arities are called
                # without unpacking ``vals``, which would build a tuple (and, compiled, a list).
                rule = vjps[i] if into is None else into
                if params:
                    r = rule(g, *vals, **params)  # type: ignore[misc]
                elif n == 2:
                    r = rule(g, vals[0], vals[1])  # type: ignore[misc]
                elif n == 3:
                    r = rule(g, vals[0], vals[1], vals[2])  # type: ignore[misc]
                else:
                    r = rule(g, *vals)  # type: ignore[misc]
                if r is not None:
                    shape, dtype = e[0]._input_meta[e[1]]
                    if r.shape != shape or (r.dtype is not dtype and r.dtype != dtype):
                        r = _fit(r, shape, dtype)
                    if not shape and not create:
                        r = backend.ensure_array(r)  # See NOTE [0-d gradients]
                out[i] = r
            i += 1
        return out

    def release_variables(self) -> None:
        spos = self._spos
        if spos or spos is SAVES_NO_TENSOR:  # See NOTE [Saved values that are not tensors]
            self._saved = _FREED

    def releasable(self) -> Any:
        return self._saved if self._spos else None

    def _saved_values(self) -> tuple[Any, ...]:
        if self._saved is _FREED:
            raise_freed(self)
        return tuple(unpack_saved(s, self, True) for s in self._saved)


# The base of the table ops' node classes (OpDef.node_cls), and the class recording makes their
# nodes as (See NOTE [Nodes are filled in as TableNode] in asyncgrad/ops/_record.py): a Python
# class, made here by a call, that names ``__weakref__`` (See NOTE [Weak references to nodes] in
# asyncgrad/graph/node.py).
TableNode: Final = cast(
    "type[FunctionNode]",
    type("TableNode", (FunctionNode,), {"__slots__": ("__weakref__",), "__module__": __name__}),
)
