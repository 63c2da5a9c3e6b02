"""The engine against a reference: random graphs, differentiated by asyncgrad and by a small
engine kept in this file.

The reference is a list of nodes over float64 NumPy arrays, each op with a hand-written local
vector-Jacobian product; its backward is a depth-first topological sort from the roots and one
reversed loop that sums gradients per value. Hypothesis draws graphs with fan-out, fan-in,
multi-output nodes (split, chunk, unbind), views (reshape, transpose, slicing, of leaves too),
several leaves and several roots with random grad_outputs; each graph is built again with
asyncgrad ops and both results must agree.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import asyncgrad as ag

from .helpers import TIMEOUT_S

Array = np.ndarray[Any, Any]
Shape = tuple[int, ...]

# float64 throughout; the two sides differ only in rounding (summation order, BLAS).
RTOL: Final = 1e-9
ATOL: Final = 1e-12
# Forward values are kept below this, so that exp and repeated products stay well-conditioned.
MAX_ABS: Final = 1e4
CONCURRENT: Final = 4

ORACLE = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
# Each async test runs once on asyncio's loop and once on uvloop (tests/conftest.py lists the
# loops); a loop that is not installed is skipped with that reason.
EVERY_LOOP = pytest.mark.asyncio(loop_factories=["asyncio", "uvloop"])


# ----------------------------------------------------------------------------- reference
@dataclass(frozen=True)
class Node:
    op: str
    inputs: tuple[int, ...]  # value ids read
    outputs: tuple[int, ...]  # value ids produced (several for split and unbind)
    arg: Any = None


def forward(op: str, xs: list[Array], arg: Any) -> list[Array]:
    match op:
        case "leaf":
            ys = [arg]
        case "add":
            ys = [xs[0] + xs[1]]
        case "sub":
            ys = [xs[0] - xs[1]]
        case "mul":
            ys = [xs[0] * xs[1]]
        case "matmul":
            ys = [xs[0] @ xs[1]]
        case "tanh":
            ys = [np.tanh(xs[0])]
        case "exp":
            ys = [np.exp(xs[0])]
        case "sin":
            ys = [np.sin(xs[0])]
        case "sum":
            axis, keepdim = arg
            ys = [np.sum(xs[0], axis=axis, keepdims=keepdim)]
        case "reshape":
            ys = [xs[0].reshape(arg)]
        case "transpose":
            ys = [np.swapaxes(xs[0], *arg)]
        case "slice":
            ys = [xs[0][arg]]
        case "split":
            dim, sizes, _ = arg
            ys = np.split(xs[0], np.cumsum(sizes)[:-1], axis=dim)
        case "unbind":
            ys = [np.take(xs[0], i, axis=arg) for i in range(xs[0].shape[arg])]
    return [np.array(y, dtype=np.float64) for y in ys]


def vjp(op: str, xs: list[Array], gs: list[Array], arg: Any) -> list[Array]:
    """The gradients of a node's inputs, given the gradients of all its outputs."""
    g = gs[0]
    match op:
        case "add":
            return [g, g]
        case "sub":
            return [g, -g]
        case "mul":
            return [g * xs[1], g * xs[0]]
        case "matmul":
            return [g @ xs[1].T, xs[0].T @ g]
        case "tanh":
            return [g * (1.0 - np.tanh(xs[0]) ** 2)]
        case "exp":
            return [g * np.exp(xs[0])]
        case "sin":
            return [g * np.cos(xs[0])]
        case "sum":
            axis, keepdim = arg
            if axis is not None and not keepdim:
                g = np.expand_dims(g, axis)
            return [np.broadcast_to(g, xs[0].shape)]
        case "reshape":
            return [g.reshape(xs[0].shape)]
        case "transpose":
            return [np.swapaxes(g, *arg)]
        case "slice":
            out = np.zeros_like(xs[0])
            out[arg] = g
            return [out]
        case "split":
            return [np.concatenate(gs, axis=arg[0])]
        case "unbind":
            return [np.stack(gs, axis=arg)]
    raise AssertionError(f"no vjp for {op}")


@dataclass
class Graph:
    nodes: list[Node] = field(default_factory=list)
    values: list[Array] = field(default_factory=list)  # forward value of each value id
    leaves: list[int] = field(default_factory=list)
    roots: list[int] = field(default_factory=list)
    seeds: list[Array] = field(default_factory=list)  # grad_outputs, one per root

    def add(self, op: str, inputs: Sequence[int], arg: Any = None) -> tuple[int, ...]:
        ys = forward(op, [self.values[v] for v in inputs], arg)
        ids = tuple(range(len(self.values), len(self.values) + len(ys)))
        self.values.extend(ys)
        self.nodes.append(Node(op, tuple(inputs), ids, arg))
        if op == "leaf":
            self.leaves.extend(ids)
        return ids

    def shape(self, v: int) -> Shape:
        return self.values[v].shape

    def terms(self, values: Sequence[Array]) -> list[Array]:
        """seed_r * root_r for each root: the objective differentiated is the sum of them all."""
        return [s * values[r] for r, s in zip(self.roots, self.seeds, strict=True)]

    def __repr__(self) -> str:
        lines = []
        for n in self.nodes:
            outs = ", ".join(f"v{v}" for v in n.outputs)
            if n.op == "leaf":
                lines.append(f"{outs} = leaf({n.arg.tolist()!r})")
            else:
                ins = ", ".join(f"v{v}" for v in n.inputs)
                extra = "" if n.arg is None else f", {n.arg!r}"
                lines.append(f"{outs} = {n.op}({ins}{extra})")
        for r, s in zip(self.roots, self.seeds, strict=True):
            lines.append(f"root v{r}, grad_output {s.tolist()!r}")
        return "Graph(\n  " + "\n  ".join(lines) + "\n)"


def evaluate(graph: Graph, leaf_values: dict[int, Array]) -> list[Array]:
    """Forward values of every value id, with the given arrays in place of some leaves."""
    values: list[Array] = []
    for n in graph.nodes:
        if n.op == "leaf" and n.outputs[0] in leaf_values:
            values.append(leaf_values[n.outputs[0]])
        else:
            values.extend(forward(n.op, [values[v] for v in n.inputs], n.arg))
    return values


def reference_grads(graph: Graph, seeds: Sequence[Array] | None = None) -> list[Array | None]:
    """d(sum_r <seed_r, root_r>)/d(value) for every value id; None where no path leads to a root."""
    seeds = graph.seeds if seeds is None else seeds
    producer = {v: i for i, n in enumerate(graph.nodes) for v in n.outputs}
    order: list[int] = []
    seen: set[int] = set()

    def visit(i: int) -> None:
        if i not in seen:
            seen.add(i)
            for v in graph.nodes[i].inputs:
                visit(producer[v])
            order.append(i)

    for r in graph.roots:
        visit(producer[r])
    grads: list[Array | None] = [None] * len(graph.values)

    def accumulate(v: int, g: Array) -> None:
        prev = grads[v]
        grads[v] = np.array(g, dtype=np.float64) if prev is None else prev + g

    for r, s in zip(graph.roots, seeds, strict=True):
        accumulate(r, s)
    for i in reversed(order):
        n = graph.nodes[i]
        if n.op == "leaf":
            continue
        gs = [np.zeros_like(graph.values[v]) if grads[v] is None else grads[v] for v in n.outputs]
        xs = [graph.values[v] for v in n.inputs]
        for v, g in zip(n.inputs, vjp(n.op, xs, gs, n.arg), strict=True):
            accumulate(v, g)
    return grads


# ----------------------------------------------------------------------------- strategies
def _sizes_of_step(n: int, step: int) -> tuple[int, ...]:
    return (step,) * (n // step) + ((n % step,) if n % step else ())


@st.composite
def _split_arg(draw: st.DrawFn, shape: Shape) -> tuple[int, tuple[int, ...], tuple[str, Any]]:
    dim = draw(st.sampled_from(range(len(shape))))
    n = shape[dim]
    call = draw(st.sampled_from(["sections", "size", "chunk"]))
    if call == "sections":
        cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=n - 1)) if n > 1 else [])
        sizes = tuple(np.diff([0, *cuts, n]).tolist())
        return dim, sizes, ("split", list(sizes))
    if call == "size":
        step = draw(st.integers(1, n))
        return dim, _sizes_of_step(n, step), ("split", step)
    chunks = draw(st.integers(1, n))
    return dim, _sizes_of_step(n, -(-n // chunks)), ("chunk", chunks)


@st.composite
def _new_shape(draw: st.DrawFn, size: int) -> Shape:
    ndim = draw(st.integers(0 if size == 1 else 1, 3))
    dims: list[int] = []
    rest = size
    for _ in range(ndim - 1):
        d = draw(st.sampled_from([k for k in range(1, rest + 1) if rest % k == 0]))
        dims.append(d)
        rest //= d
    return (*dims, rest) if ndim else ()


@st.composite
def _index(draw: st.DrawFn, shape: Shape) -> tuple[int | slice, ...]:
    index: list[int | slice] = []
    for n in shape[: draw(st.integers(1, len(shape)))]:
        if draw(st.booleans()):
            index.append(draw(st.integers(0, n - 1)))
        else:
            start = draw(st.integers(0, n - 1))
            index.append(slice(start, draw(st.integers(start + 1, n)), draw(st.integers(1, 2))))
    return tuple(index)


@st.composite
def _add_op(draw: st.DrawFn, g: Graph) -> None:
    x = draw(st.sampled_from(range(len(g.values))))
    shape = g.shape(x)
    ndim = len(shape)
    partners = [v for v in range(len(g.values)) if g.shape(v) == shape]
    # Right operands for x @ y; None stands for a transpose of x made on the spot.
    right = [v for v in range(len(g.values)) if ndim == len(g.shape(v)) == 2]
    right = [v for v in right if g.shape(v)[0] == shape[1]] + [None]
    kinds = ["binary", "binary", "unary", "reshape"]
    kinds += ["sum", "slice", "split", "unbind"] if ndim >= 1 else []
    kinds += ["transpose"] if ndim >= 2 else []
    kinds += ["matmul"] if ndim == 2 else []
    match draw(st.sampled_from(kinds)):
        case "binary":
            op = draw(st.sampled_from(["add", "sub", "mul"]))
            g.add(op, [x, draw(st.sampled_from(partners))])
        case "unary":
            g.add(draw(st.sampled_from(["tanh", "exp", "sin"])), [x])
        case "matmul":
            y = draw(st.sampled_from(right))
            if y is None:
                (y,) = g.add("transpose", [x], (0, 1))
            g.add("matmul", [x, y])
        case "reshape":
            g.add("reshape", [x], draw(_new_shape(int(np.prod(shape)))))
        case "transpose":
            d0, d1 = draw(st.permutations(range(ndim)))[:2]
            g.add("transpose", [x], (d0, d1))
        case "sum":
            axis = draw(st.one_of(st.none(), st.sampled_from(range(ndim))))
            g.add("sum", [x], (axis, axis is not None and draw(st.booleans())))
        case "slice":
            g.add("slice", [x], draw(_index(shape)))
        case "split":
            g.add("split", [x], draw(_split_arg(shape)))
        case "unbind":
            g.add("unbind", [x], draw(st.sampled_from(range(ndim))))


@st.composite
def graphs(draw: st.DrawFn, max_ops: int = 14) -> Graph:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    g = Graph()
    for _ in range(draw(st.integers(1, 3))):
        ndim = draw(st.sampled_from([1, 2, 3, 0]))
        shape = tuple(draw(st.lists(st.integers(1, 3), min_size=ndim, max_size=ndim)))
        g.add("leaf", [], rng.uniform(-1.5, 1.5, size=shape))
    for _ in range(draw(st.integers(min(3, max_ops), max_ops))):
        draw(_add_op(g))
    assume(all(np.all(np.abs(v) < MAX_ABS) for v in g.values))
    # At least one root is not a leaf; the others may be leaves or repeat a root.
    inner = [v for v in range(len(g.values)) if v not in g.leaves]
    more = draw(st.lists(st.sampled_from(range(len(g.values))), max_size=3))
    g.roots = [draw(st.sampled_from(inner)), *more]
    g.seeds = [rng.normal(size=g.shape(r)) for r in g.roots]
    return g


# ----------------------------------------------------------------------------- asyncgrad side
def apply(n: Node, xs: list[ag.Tensor]) -> Sequence[ag.Tensor]:
    match n.op:
        case "leaf":
            return [ag.tensor(n.arg, dtype=ag.float64, requires_grad=True)]
        case "add":
            return [xs[0] + xs[1]]
        case "sub":
            return [xs[0] - xs[1]]
        case "mul":
            return [xs[0] * xs[1]]
        case "matmul":
            return [xs[0] @ xs[1]]
        case "tanh":
            return [xs[0].tanh()]
        case "exp":
            return [xs[0].exp()]
        case "sin":
            return [xs[0].sin()]
        case "sum":
            axis, keepdim = n.arg
            return [xs[0].sum() if axis is None else xs[0].sum(dim=axis, keepdim=keepdim)]
        case "reshape":
            return [xs[0].reshape(n.arg)]
        case "transpose":
            return [xs[0].transpose(*n.arg)]
        case "slice":
            return [xs[0][n.arg]]
        case "split":
            dim, _, (how, size) = n.arg
            return xs[0].chunk(size, dim) if how == "chunk" else xs[0].split(size, dim)
        case "unbind":
            return xs[0].unbind(n.arg)
    raise AssertionError(f"no asyncgrad op for {n.op}")


def build(graph: Graph) -> list[ag.Tensor]:
    """The graph rebuilt with asyncgrad ops: one tensor per value id, forward checked."""
    tensors: list[ag.Tensor] = []
    for n in graph.nodes:
        tensors.extend(apply(n, [tensors[v] for v in n.inputs]))
        assert len(tensors) == n.outputs[-1] + 1, f"{n.op} gave the wrong number of outputs"
    for v, t in enumerate(tensors):
        assert t.requires_grad
        assert t.dtype == np.float64
        np.testing.assert_allclose(t.detach().numpy(), graph.values[v], rtol=1e-12, atol=1e-12)
    return tensors


@contextlib.contextmanager
def short_engine_slices() -> Iterator[None]:
    """Make the engine's worker yield to the loop as often as it can (every few nodes)."""
    old = ag.autograd.engine.slice_s
    ag.autograd.engine.configure(slice_s=1e-9)
    try:
        yield
    finally:
        ag.autograd.engine.configure(slice_s=old)


@dataclass
class Built:
    graph: Graph
    tensors: list[ag.Tensor]

    @classmethod
    def of(cls, graph: Graph) -> Built:
        return cls(graph, build(graph))

    @property
    def leaves(self) -> list[ag.Tensor]:
        return [self.tensors[v] for v in self.graph.leaves]

    @property
    def outputs(self) -> list[ag.Tensor]:
        return [self.tensors[v] for v in self.graph.roots]

    def seeds(self, scale: float = 1) -> list[ag.Tensor]:
        return [ag.tensor(scale * s, dtype=ag.float64) for s in self.graph.seeds]


def assert_grads(
    got: Sequence[ag.Tensor | None], expected: Sequence[Array | None], what: Sequence[int]
) -> None:
    """Each got[i] is the reference's expected[i] (None where no path reaches a root)."""
    scale = 1.0 + max((float(np.max(np.abs(e))) for e in expected if e is not None), default=0.0)
    assert len(got) == len(expected)
    for v, g, e in zip(what, got, expected, strict=True):
        if e is None:
            assert g is None, f"v{v}: no path to a root, yet got gradient {g}"
            continue
        assert g is not None, f"v{v}: expected a gradient, got None"
        assert not g.requires_grad
        a = g.numpy()
        assert a.dtype == np.float64, f"v{v}: dtype {a.dtype}"
        assert a.shape == e.shape, f"v{v}: shape {a.shape}, expected {e.shape}"
        np.testing.assert_allclose(a, e, rtol=RTOL, atol=ATOL * scale, err_msg=f"v{v}")


def assert_leaf_grads(built: Built, expected: list[Array | None], only: Sequence[int]) -> None:
    """``.grad`` of the leaves in ``only`` equals the reference; every other leaf has none."""
    for v in built.graph.leaves:
        if v not in only:
            assert built.tensors[v].grad is None, f"v{v} is not in inputs, yet has a .grad"
    assert_grads([built.tensors[v].grad for v in only], [expected[v] for v in only], only)


# ----------------------------------------------------------------------------- the reference
@ORACLE
@given(graph=graphs(max_ops=8))
def test_reference_agrees_with_finite_differences(graph: Graph) -> None:
    """The oracle itself: central differences of sum_r <seed_r, root_r> at every leaf entry."""
    expected = reference_grads(graph)
    h = 1e-6
    # Rounding in the differences grows with the terms summed in the objective.
    size = 1.0 + sum(float(np.sum(np.abs(t))) for t in graph.terms(graph.values))

    def objective(v: int, where: tuple[int, ...], delta: float) -> float:
        moved = graph.values[v].copy()
        moved[where] += delta
        values = evaluate(graph, {v: moved})
        return sum(float(np.sum(t)) for t in graph.terms(values))

    for v in graph.leaves:
        numeric = np.zeros_like(graph.values[v])
        for where in np.ndindex(*numeric.shape):
            numeric[where] = (objective(v, where, h) - objective(v, where, -h)) / (2 * h)
        e = expected[v]
        if e is None:
            assert np.all(numeric == 0.0)
        else:
            np.testing.assert_allclose(e, numeric, rtol=1e-6, atol=1e-7 * size)


# ----------------------------------------------------------------------------- the engine
@EVERY_LOOP
async def test_runs_on_the_loop_it_names(request: pytest.FixtureRequest) -> None:
    module = type(asyncio.get_running_loop()).__module__.partition(".")[0]
    assert module == request.node.callspec.id


@EVERY_LOOP
@ORACLE
@given(graph=graphs())
async def test_grad_matches_reference(graph: Graph) -> None:
    b = Built.of(graph)
    async with asyncio.timeout(TIMEOUT_S):
        got = await ag.grad(b.outputs, b.leaves, b.seeds(), allow_unused=True)
    expected = reference_grads(graph)
    assert_grads(got, [expected[v] for v in graph.leaves], graph.leaves)


@ORACLE
@given(graph=graphs())
def test_grad_sync_matches_reference(graph: Graph) -> None:
    b = Built.of(graph)
    got = ag.grad_sync(b.outputs, b.leaves, b.seeds(), allow_unused=True)
    expected = reference_grads(graph)
    assert_grads(got, [expected[v] for v in graph.leaves], graph.leaves)


@EVERY_LOOP
@ORACLE
@given(graph=graphs())
async def test_concurrent_passes_over_one_retained_graph(graph: Graph) -> None:
    """grad and backward passes at once over one graph, each with its own grad_outputs
    (k * seeds), starting k loop iterations apart while the engine yields every few nodes."""
    b = Built.of(graph)
    expected = reference_grads(graph)

    async def grad(k: int) -> tuple[list[int], tuple[ag.Tensor | None, ...]]:
        for _ in range(k):
            await asyncio.sleep(0)  # a yield to the loop, not a timed wait
        order = graph.leaves if k % 2 else graph.leaves[::-1]
        wrt = [b.tensors[v] for v in order]
        async with asyncio.timeout(TIMEOUT_S):
            got = await ag.grad(b.outputs, wrt, b.seeds(k), retain_graph=True, allow_unused=True)
        return order, got

    async def backward(k: int) -> None:
        for _ in range(k):
            await asyncio.sleep(0)
        async with asyncio.timeout(TIMEOUT_S):
            await ag.backward(b.outputs, b.seeds(k), retain_graph=True)

    with short_engine_slices():
        async with asyncio.timeout(TIMEOUT_S):
            results = await asyncio.gather(
                *(grad(k) for k in range(1, CONCURRENT + 1)), backward(2), backward(3)
            )
    for k, (order, got) in enumerate(results[:CONCURRENT], start=1):
        assert_grads(got, [None if expected[v] is None else k * expected[v] for v in order], order)
    assert_leaf_grads(b, [None if e is None else 5.0 * e for e in expected], graph.leaves)


@EVERY_LOOP
@ORACLE
@given(graph=graphs())
async def test_second_grad_over_retained_graph_matches(graph: Graph) -> None:
    b = Built.of(graph)
    expected = [reference_grads(graph)[v] for v in graph.leaves]
    async with asyncio.timeout(TIMEOUT_S):
        first = await ag.grad(b.outputs, b.leaves, b.seeds(), retain_graph=True, allow_unused=True)
    async with asyncio.timeout(TIMEOUT_S):
        second = await ag.grad(b.outputs, b.leaves, b.seeds(), allow_unused=True)
    assert_grads(first, expected, graph.leaves)
    assert_grads(second, expected, graph.leaves)


@EVERY_LOOP
@ORACLE
@given(graph=graphs())
async def test_backward_twice_accumulates_twice(graph: Graph) -> None:
    b = Built.of(graph)
    async with asyncio.timeout(TIMEOUT_S):
        await ag.backward(b.outputs, b.seeds(), retain_graph=True)
    async with asyncio.timeout(TIMEOUT_S):
        await ag.backward(b.outputs, b.seeds())
    doubled = [None if g is None else 2.0 * g for g in reference_grads(graph)]
    assert_leaf_grads(b, doubled, graph.leaves)


@EVERY_LOOP
@ORACLE
@given(graph=graphs(), data=st.data())
async def test_backward_inputs_fills_only_those_leaves(graph: Graph, data: st.DataObject) -> None:
    subset = data.draw(
        st.lists(st.sampled_from(graph.leaves), min_size=1, unique=True), label="inputs"
    )
    b = Built.of(graph)
    async with asyncio.timeout(TIMEOUT_S):
        await ag.backward(b.outputs, b.seeds(), inputs=[b.tensors[v] for v in subset])
    assert_leaf_grads(b, reference_grads(graph), subset)


@EVERY_LOOP
@ORACLE
@given(graph=graphs(), data=st.data())
async def test_grad_wrt_intermediate_values(graph: Graph, data: st.DataObject) -> None:
    """Inputs are any values, at least one not a leaf (views and split outputs too)."""
    inner = [v for v in range(len(graph.values)) if v not in graph.leaves]
    first = data.draw(st.sampled_from(inner), label="intermediate")
    others = data.draw(st.lists(st.sampled_from(range(len(graph.values))), max_size=3))
    wrt = [first, *others]  # repeats allowed: each gets the same gradient
    b = Built.of(graph)
    async with asyncio.timeout(TIMEOUT_S):
        got = await ag.grad(b.outputs, [b.tensors[v] for v in wrt], b.seeds(), allow_unused=True)
    expected = reference_grads(graph)
    assert_grads(got, [expected[v] for v in wrt], wrt)
