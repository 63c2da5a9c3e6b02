"""Per-request parameter gradients from one batched pass: the modules' per-sample rules.

NOTE [Per-request parameter gradients]
A batch of requests through a model gives one gradient per parameter, the sum of every
request's own. For a module whose parameters act on each row by itself, the request's own part
can be read back from the batch: the module's input rows ``x_r`` and the gradient of its output
rows ``g_r`` (both of the batched pass) determine it exactly.
  - Linear: ``weight`` gets ``g_r^T x_r`` and ``bias`` the sum of ``g_r``, over the request's
    rows and any dimensions between the batch and the features.
  - LayerNorm: ``weight`` gets the sum of ``g_r * x̂_r`` (``x̂`` the normalised input, computed
    again from ``x_r`` with the module's ``eps``) and ``bias`` the sum of ``g_r``, over every
    dimension but the normalised ones.
  - GroupNorm: as LayerNorm, with ``x̂`` normalised per sample and group, summed over every
    dimension but the channels.
  - Conv1d, Conv2d (one group, numeric padding): ``weight`` gets ``g_r`` times the sliding
    blocks of ``x_r`` (im2col, ``F.unfold``) summed over positions, ``bias`` the sum of
    ``g_r`` over positions.
  - RNNCell, GRUCell, LSTMCell (called step by step, the state by position or as ``hx=``):
    the gradients of the gates' two projections (``W_ih x + b_ih`` and ``W_hh h + b_hh``) are
    computed again from the captured inputs, the state and the gradients of the outputs (for
    LSTMCell both ``h'`` and ``c'``; that of ``c'`` is its whole gradient, its use in ``h'``
    included); ``W_ih`` then gets ``d_ih^T x_r``, ``W_hh`` gets ``d_hh^T h_r``, the biases
    their sums, and each step's share adds up over the steps.
  - Embedding: ``weight`` gets the rows of ``g_r`` added at the request's indices, with the
    ``padding_idx`` row left at zero (``max_norm`` and ``scale_grad_by_freq`` have no rule:
    their gradient depends on the whole batch).
``ag.serving.Coalescer.parameter_grads`` captures each such module's input and output with a
forward hook during the batch's forward, runs one backward to the captured outputs, and
applies these rules per request. It is exact only if every use of a parameter in the graph is
one of the captured calls: ``graph_uses`` counts the graph's edges into each parameter's
accumulator, and where a parameter has uses no rule covers (a parameter of another module,
one used outside its module, a module without a rule: grouped convolutions, PReLU), each
request of the batch runs alone instead: one forward and backward per request, exact by
construction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from . import backend, dtypes, ops
from ._tensor import Tensor
from .graph.grad_mode import no_grad
from .nn import functional as F
from .nn.modules import Conv1d, Conv2d, Embedding, LayerNorm, Linear, Module
from .nn.normalization import GroupNorm
from .nn.rnn import GRUCell, LSTMCell, RNNCell

__all__ = [
    "CELL_RULES", "RULES", "Call", "call_of", "covered", "graph_uses", "has_rule", "per_request",
]  # fmt: skip

# A rule: (module, its input, the gradient of its output, the requests' row counts, where the
# large products go) -> for each request, its (parameter, gradient) pairs.
Rule = Callable[
    [Any, Tensor, Tensor, Sequence[int], backend.Blocks], list[list[tuple[Tensor, Tensor]]]
]
# A cell's rule: (cell, its inputs (x, h[, c]), the gradients of its outputs, the row counts).
CellRule = Callable[
    [Any, tuple[Tensor | None, ...], tuple[Tensor | None, ...], Sequence[int]],
    list[list[tuple[Tensor, Tensor]]],
]


class Call:
    """One captured call of a module with a rule: its tensor inputs (None where a state was
    not given) and outputs."""

    __slots__ = ("inputs", "module", "outputs")

    def __init__(
        self, module: Module, inputs: tuple[Tensor | None, ...], outputs: tuple[Tensor, ...]
    ) -> None:
        self.module = module
        self.inputs = inputs
        self.outputs = outputs


def call_of(
    module: Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any
) -> Call | None:
    """The call ``module(*args, **kwargs) -> output`` as a rule reads it, or None where its
    arguments are not what the rule knows (the call then counts as a use no rule covers)."""
    x = args[0] if args else kwargs.get("input")
    if not isinstance(x, Tensor):
        return None
    if isinstance(module, (RNNCell, GRUCell, LSTMCell)):
        hx = args[1] if len(args) > 1 else kwargs.get("hx")
        if isinstance(module, LSTMCell):
            if not (isinstance(output, tuple) and len(output) == 2):
                return None
            h, c = (None, None) if hx is None else hx
            if not all(t is None or isinstance(t, Tensor) for t in (h, c)):
                return None
            return Call(module, (x, h, c), tuple(output))
        if hx is not None and not isinstance(hx, Tensor):
            return None
        return Call(module, (x, hx), (output,)) if isinstance(output, Tensor) else None
    return Call(module, (x,), (output,)) if isinstance(output, Tensor) else None


def _slices(rows: Sequence[int]) -> Iterable[slice]:
    start = 0
    for n in rows:
        yield slice(start, start + n)
        start += n


def _linear(
    m: Linear, x: Tensor, g: Tensor, rows: Sequence[int], blocks: backend.Blocks
) -> list[list[tuple[Tensor, Tensor]]]:
    # Requests of equal row counts get their weight gradients from one batched product, into
    # one allocation (See NOTE [Per-request gradients in one allocation]).
    out: list[list[tuple[Tensor, Tensor]]] = [[] for _ in rows]
    for idx, xs, gs in _groups(x, g, rows):
        r = len(idx)
        gr = gs.reshape(r, -1, gs.shape[-1]).transpose(1, 2)  # (requests, out, positions)
        xr = xs.reshape(r, -1, xs.shape[-1])  # (requests, positions, in)
        gw = _products(blocks, gr, xr)
        _deal(out, idx, m, gw, gr.sum(2) if m.bias is not None else None)
    return out


def _products(blocks: backend.Blocks, a: Tensor, b: Tensor) -> Tensor:
    """The stacked products ``a @ b`` of ``(requests, m, k)`` by ``(requests, k, n)``, into a
    block of ``blocks`` (See NOTE [Reused blocks] in asyncgrad/backend/__init__.py); for one
    ``k``, the outer products (the same products)."""
    aa, ba = a._array, b._array
    out = blocks.empty((a.shape[0], a.shape[1], b.shape[2]), dtypes.result_type(a, b), aa)
    if b.shape[1] == 1:
        backend.outer_into(aa[:, :, 0], ba[:, 0, :], out)
    else:
        backend.matmul_into(aa, ba, out)
    return Tensor._wrap(out)


def _deal(
    out: list[list[tuple[Tensor, Tensor]]],
    idx: list[int],
    m: Linear | Conv1d | Conv2d,
    gw: Tensor,
    gb: Tensor | None,
) -> None:
    """Give request ``idx[j]`` its views ``gw[j]`` of the weight's and ``gb[j]`` of the bias's
    gradients, from its group's products."""
    for j, i in enumerate(idx):
        out[i].append((m.weight, gw[j]))
        if gb is not None and m.bias is not None:
            out[i].append((m.bias, gb[j]))


# NOTE [Per-request gradients in one allocation]
# Each request's gradient of a weight is new memory, and for small requests writing it is most
# of the cost: 64 one-sample requests of an MLP 784-256-256-10 write 64 MB of gradients, and
# computed one request at a time (64 allocations of up to 800 kB per layer) the weight products
# took 39 of a batch's 73 ms on a 2-core VM, about 200 µs each against 52 µs into reused
# memory, because the allocator returns the freed memory to the kernel between batches and
# every page is faulted in again. So the requests of each row count share one product over the
# batch, ``(requests, out, in)``, in one allocation (which NumPy backs with huge pages from
# 4 MB on, where the kernel allows), and each request's gradient is a view of it: a request
# that keeps its gradient keeps its group's block alive. A large block is still a mapping of
# its own, faulted in again each batch; the coalescer keeps its blocks and reuses those no
# request holds any more (See NOTE [Reused blocks] in asyncgrad/backend/__init__.py).
def _groups(
    x: Tensor, g: Tensor, rows: Sequence[int]
) -> Iterable[tuple[list[int], Tensor, Tensor]]:
    """The requests grouped by row count: (their indices, their rows of ``x``, of ``g``)."""
    by_count: dict[int, list[int]] = {}
    for i, n in enumerate(rows):
        by_count.setdefault(n, []).append(i)
    if len(by_count) == 1:
        yield list(range(len(rows))), x, g
        return
    slices = list(_slices(rows))
    for idx in by_count.values():
        yield (
            idx,
            ops.cat([x[slices[i]] for i in idx], 0),
            ops.cat([g[slices[i]] for i in idx], 0),
        )


def _layer_norm(
    m: LayerNorm, x: Tensor, g: Tensor, rows: Sequence[int], blocks: backend.Blocks
) -> list[list[tuple[Tensor, Tensor]]]:
    shape = tuple(m.normalized_shape)
    x_hat = F.layer_norm(x, shape, None, None, m.eps)
    return _affine(m, x_hat, g, rows, tuple(range(x.dim() - len(shape))))


def _group_norm(
    m: GroupNorm, x: Tensor, g: Tensor, rows: Sequence[int], blocks: backend.Blocks
) -> list[list[tuple[Tensor, Tensor]]]:
    x_hat = F.group_norm(x, m.num_groups, None, None, m.eps)
    return _affine(m, x_hat, g, rows, (0, *range(2, x.dim())))  # all but the channels


def _affine(
    m: LayerNorm | GroupNorm,
    x_hat: Tensor,
    g: Tensor,
    rows: Sequence[int],
    dims: tuple[int, ...],
) -> list[list[tuple[Tensor, Tensor]]]:
    """A normalisation's affine part per request: ``weight`` gets ``g_r * x̂_r`` and ``bias``
    ``g_r``, summed over ``dims``."""
    out = []
    for s in _slices(rows):
        pairs: list[tuple[Tensor, Tensor]] = []
        if m.weight is not None:
            pairs.append((m.weight, (g[s] * x_hat[s]).sum(dims)))
        if m.bias is not None:
            pairs.append((m.bias, g[s].sum(dims)))
        out.append(pairs)
    return out


def _conv(
    m: Conv1d | Conv2d, x: Tensor, g: Tensor, rows: Sequence[int], blocks: backend.Blocks
) -> list[list[tuple[Tensor, Tensor]]]:
    # The weight gradient of a convolution is the output gradient times the input's sliding
    # blocks (im2col), summed over positions: per request, one batched product per row count.
    k, st, pd, dl = m.kernel_size, m.stride, m.padding, m.dilation
    if isinstance(m, Conv1d):  # as a convolution over (1, L)
        x, g = x.unsqueeze(2), g.unsqueeze(2)
        k, st, pd, dl = (1, *k), (1, *st), (0, *pd), (1, *dl)
    cols = F.unfold(x, k, dl, pd, st)  # (rows, in x kernel, positions)
    n, c_out = g.shape[0], g.shape[1]
    gg = g.reshape(n, c_out, -1)  # (rows, out, positions)
    out: list[list[tuple[Tensor, Tensor]]] = [[] for _ in rows]
    for idx, cs, gs in _groups(cols, gg, rows):
        r = len(idx)
        per = gs.shape[0] // r
        positions = gs.shape[2]
        go = gs.reshape(r, per, c_out, positions).permute(0, 2, 1, 3)
        co = cs.reshape(r, per, cs.shape[1], positions).permute(0, 1, 3, 2)
        gw = _products(
            blocks, go.reshape(r, c_out, per * positions), co.reshape(r, per * positions, -1)
        ).reshape(r, *m.weight.shape)
        _deal(out, idx, m, gw, go.sum((2, 3)) if m.bias is not None else None)
    return out


def _embedding(
    m: Embedding, x: Tensor, g: Tensor, rows: Sequence[int], blocks: backend.Blocks
) -> list[list[tuple[Tensor, Tensor]]]:
    w = m.weight
    dim = w.shape[1]
    out: list[list[tuple[Tensor, Tensor]]] = []
    for s in _slices(rows):
        gw = w.new_zeros(w.shape).index_add_(0, x[s].reshape(-1), g[s].reshape(-1, dim))
        if m.padding_idx is not None:
            gw[m.padding_idx] = 0
        out.append([(w, gw)])
    return out


def _cell_pairs(
    m: RNNCell | GRUCell | LSTMCell,
    x: Tensor,
    h: Tensor | None,
    d_ih: Tensor,
    d_hh: Tensor,
    rows: Sequence[int],
) -> list[list[tuple[Tensor, Tensor]]]:
    """A cell's per-request gradients from the gradients of its gates' two projections
    (``d_ih`` of ``W_ih x + b_ih``, ``d_hh`` of ``W_hh h + b_hh``)."""
    out = []
    for s in _slices(rows):
        pairs: list[tuple[Tensor, Tensor]] = [(m.weight_ih, d_ih[s].t() @ x[s])]
        if h is not None:
            pairs.append((m.weight_hh, d_hh[s].t() @ h[s]))
        if m.bias_ih is not None and m.bias_hh is not None:
            pairs += [(m.bias_ih, d_ih[s].sum(0)), (m.bias_hh, d_hh[s].sum(0))]
        out.append(pairs)
    return out


def _projections(
    m: RNNCell | GRUCell | LSTMCell, x: Tensor, h: Tensor | None
) -> tuple[Tensor, Tensor]:
    """The gates' projections ``W_ih x + b_ih`` and ``W_hh h + b_hh`` computed again, as the
    cell computes them (a missing state is zeros)."""
    xw = F.linear(x, m.weight_ih, m.bias_ih)
    if h is None:
        hw = xw.new_zeros(xw.shape) if m.bias_hh is None else m.bias_hh.expand(*xw.shape)
    else:
        hw = F.linear(h, m.weight_hh, m.bias_hh)
    return xw, hw


def _one_state(
    m: RNNCell | GRUCell, inputs: tuple[Tensor | None, ...], gys: tuple[Tensor | None, ...]
) -> tuple[Tensor, Tensor | None, Tensor, Tensor, Tensor]:
    """A one-state cell's call: its input, state, the gradient of its output, and the gates'
    two projections computed again."""
    x, h = inputs
    (gy,) = gys
    assert x is not None
    assert gy is not None
    xw, hw = _projections(m, x, h)
    return x, h, gy, xw, hw


def _rnn_cell(
    m: RNNCell,
    inputs: tuple[Tensor | None, ...],
    gys: tuple[Tensor | None, ...],
    rows: Sequence[int],
) -> list[list[tuple[Tensor, Tensor]]]:
    x, h, gy, xw, hw = _one_state(m, inputs, gys)
    pre = xw + hw
    if m.nonlinearity == "tanh":
        t = pre.tanh()
        d = gy * (1 - t * t)
    else:
        d = gy * (pre > 0).to(gy.dtype)
    return _cell_pairs(m, x, h, d, d, rows)


def _gru_cell(
    m: GRUCell,
    inputs: tuple[Tensor | None, ...],
    gys: tuple[Tensor | None, ...],
    rows: Sequence[int],
) -> list[list[tuple[Tensor, Tensor]]]:
    x, h, gy, xw, hw = _one_state(m, inputs, gys)
    x_r, x_z, x_n = xw.chunk(3, -1)
    h_r, h_z, h_n = hw.chunk(3, -1)
    r = (x_r + h_r).sigmoid()
    z = (x_z + h_z).sigmoid()
    n = (x_n + r * h_n).tanh()
    prev = h if h is not None else gy.new_zeros(gy.shape)
    a = gy * (1 - z) * (1 - n * n)  # the gradient of n's argument
    d_r = a * h_n * r * (1 - r)
    d_z = gy * (prev - n) * z * (1 - z)
    d_ih = ops.cat([d_r, d_z, a], -1)
    d_hh = ops.cat([d_r, d_z, a * r], -1)
    return _cell_pairs(m, x, h, d_ih, d_hh, rows)


def _lstm_cell(
    m: LSTMCell,
    inputs: tuple[Tensor | None, ...],
    gys: tuple[Tensor | None, ...],
    rows: Sequence[int],
) -> list[list[tuple[Tensor, Tensor]]]:
    x, h, c = inputs
    g_h, g_c = gys
    assert x is not None
    xw, hw = _projections(m, x, h)
    i, f, g, o = (xw + hw).chunk(4, -1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    prev = c if c is not None else i.new_zeros(i.shape)
    c_new = f * prev + i * g
    zeros = i.new_zeros(i.shape)
    g_h = zeros if g_h is None else g_h
    # The gradient of c' is the whole of it: its uses after this step and its use in h'.
    g_c = zeros if g_c is None else g_c
    d_o = g_h * c_new.tanh() * o * (1 - o)
    d = ops.cat([g_c * g * i * (1 - i), g_c * prev * f * (1 - f), g_c * i * (1 - g * g), d_o], -1)
    return _cell_pairs(m, x, h, d, d, rows)


CELL_RULES: dict[type, CellRule] = {RNNCell: _rnn_cell, GRUCell: _gru_cell, LSTMCell: _lstm_cell}


RULES: dict[type, Rule] = {
    Linear: _linear,
    LayerNorm: _layer_norm,
    GroupNorm: _group_norm,
    Embedding: _embedding,
    Conv1d: _conv,
    Conv2d: _conv,
}


def has_rule(m: Module) -> bool:
    """Whether ``m``'s own parameters get their per-request gradients from a rule (See NOTE
    [Per-request parameter gradients])."""
    cls = type(m)
    if cls in CELL_RULES:
        return True
    if cls not in RULES:
        return False
    if isinstance(m, Embedding):
        return m.max_norm is None and not m.scale_grad_by_freq and not m.sparse
    if isinstance(m, (Conv1d, Conv2d)):  # one group; numeric padding (im2col's)
        return m.groups == 1 and not isinstance(m.padding, str)
    return True


def per_request(
    calls: Sequence[tuple[Call, tuple[Tensor | None, ...]]],
    rows: Sequence[int],
    blocks: backend.Blocks | None = None,
) -> list[dict[int, Tensor]]:
    """Each request's parameter gradients, keyed by ``id(parameter)``, from the captured calls
    of one batch with the gradients of their outputs (None for an output that did not reach
    the backward's root); the large products go into ``blocks`` (new memory without)."""
    if blocks is None:
        blocks = backend.Blocks(0)
    grads: list[dict[int, Tensor]] = [{} for _ in rows]
    with no_grad():
        for call, gys in calls:
            if all(g is None for g in gys):
                continue
            m = call.module
            inputs = tuple(None if t is None else t.detach() for t in call.inputs)
            if type(m) in CELL_RULES:
                per = CELL_RULES[type(m)](m, inputs, gys, rows)
            else:
                x, g = inputs[0], gys[0]
                assert x is not None
                assert g is not None
                per = RULES[type(m)](m, x, g, rows, blocks)
            for mine, pairs in zip(grads, per, strict=True):
                for p, gp in pairs:
                    if not p.requires_grad:
                        continue
                    key = id(p)
                    mine[key] = gp if key not in mine else mine[key] + gp
    return grads


def covered(root: Tensor, calls: Sequence[Call], params: Sequence[Tensor], n: int) -> bool:
    """Whether the rules give every parameter's whole gradient: each captured call sees the
    batch's ``n`` rows, and every use of a parameter in ``root``'s graph is one of the calls
    (See NOTE [Per-request parameter gradients])."""
    expected = dict.fromkeys(map(id, params), 0)
    for call in calls:
        if any(
            t is not None and (t.dim() < 1 or t.shape[0] != n) for t in call.inputs + call.outputs
        ):
            return False  # a module that does not see the batch's rows: no rule holds
        for p in call.module.parameters(recurse=False):
            if id(p) in expected:
                expected[id(p)] += 1
    uses = graph_uses(root, params)
    return all(u == expected[id(p)] for u, p in zip(uses, params, strict=True))


def graph_uses(root: Tensor, params: Sequence[Tensor]) -> list[int]:
    """How many edges of ``root``'s graph lead to each of ``params``' gradient accumulators."""
    accumulators = {id(p._grad_accumulator()): i for i, p in enumerate(params)}
    counts = [0] * len(params)
    start = root.grad_fn
    if start is None:
        return counts
    seen = {id(start)}
    stack = [start]
    while stack:
        node = stack.pop()
        for nxt, _ in node.next_functions:
            if nxt is None:
                continue
            i = accumulators.get(id(nxt))
            if i is not None:
                counts[i] += 1
            if id(nxt) not in seen:
                seen.add(id(nxt))
                stack.append(nxt)
    return counts
