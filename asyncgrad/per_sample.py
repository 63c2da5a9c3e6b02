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
  - Embedding: ``weight`` gets the rows of ``g_r`` added at the request's indices, with the
    ``padding_idx`` row left at zero (``max_norm`` and ``scale_grad_by_freq`` have no rule:
    their gradient depends on the whole batch).
``ag.serving.Coalescer.parameter_grads`` captures each such module's input and output with a
forward hook during the batch's forward, runs one backward to the captured outputs, and
applies these rules per request. It is exact only if every use of a parameter in the graph is
one of the captured calls: ``graph_uses`` counts the graph's edges into each parameter's
accumulator, and where a parameter has uses no rule covers (a parameter of another module,
one used outside its module, a module without a rule: RNN cells, grouped convolutions), each
request of the batch runs alone instead: one forward and backward per request, exact by
construction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from . import ops
from ._tensor import Tensor
from .graph.grad_mode import no_grad
from .nn import functional as F
from .nn.modules import Conv1d, Conv2d, Embedding, LayerNorm, Linear, Module
from .nn.normalization import GroupNorm

__all__ = ["RULES", "graph_uses", "has_rule", "per_request"]

# A rule: (module, its input, the gradient of its output, the requests' row counts) -> for each
# request, its (parameter, gradient) pairs.
Rule = Callable[[Any, Tensor, Tensor, Sequence[int]], list[list[tuple[Tensor, Tensor]]]]


def _slices(rows: Sequence[int]) -> Iterable[slice]:
    start = 0
    for n in rows:
        yield slice(start, start + n)
        start += n


def _linear(
    m: Linear, x: Tensor, g: Tensor, rows: Sequence[int]
) -> list[list[tuple[Tensor, Tensor]]]:
    # Requests of equal row counts get their weight gradients from one batched product, into
    # one allocation (See NOTE [Per-request gradients in one allocation]).
    out: list[list[tuple[Tensor, Tensor]]] = [[] for _ in rows]
    for idx, xs, gs in _groups(x, g, rows):
        r = len(idx)
        gr = gs.reshape(r, -1, gs.shape[-1]).transpose(1, 2)  # (requests, out, positions)
        xr = xs.reshape(r, -1, xs.shape[-1])  # (requests, positions, in)
        # One position: an outer product, as a broadcast product (the same products).
        gw = gr * xr if xr.shape[1] == 1 else gr @ xr
        _deal(out, idx, m, gw, gr.sum(2) if m.bias is not None else None)
    return out


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
# that keeps its gradient keeps its group's block alive.
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
    m: LayerNorm, x: Tensor, g: Tensor, rows: Sequence[int]
) -> list[list[tuple[Tensor, Tensor]]]:
    shape = tuple(m.normalized_shape)
    lead = tuple(range(x.dim() - len(shape)))
    x_hat = F.layer_norm(x, shape, None, None, m.eps)
    out = []
    for s in _slices(rows):
        pairs: list[tuple[Tensor, Tensor]] = []
        if m.weight is not None:
            pairs.append((m.weight, (g[s] * x_hat[s]).sum(lead)))
        if m.bias is not None:
            pairs.append((m.bias, g[s].sum(lead)))
        out.append(pairs)
    return out


def _group_norm(
    m: GroupNorm, x: Tensor, g: Tensor, rows: Sequence[int]
) -> list[list[tuple[Tensor, Tensor]]]:
    others = (0, *range(2, x.dim()))  # every dimension but the channels
    x_hat = F.group_norm(x, m.num_groups, None, None, m.eps)
    out = []
    for s in _slices(rows):
        pairs: list[tuple[Tensor, Tensor]] = []
        if m.weight is not None:
            pairs.append((m.weight, (g[s] * x_hat[s]).sum(others)))
        if m.bias is not None:
            pairs.append((m.bias, g[s].sum(others)))
        out.append(pairs)
    return out


def _conv(
    m: Conv1d | Conv2d, x: Tensor, g: Tensor, rows: Sequence[int]
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
        gw = go.reshape(r, c_out, per * positions) @ co.reshape(r, per * positions, -1)
        gw = gw.reshape(r, *m.weight.shape)
        _deal(out, idx, m, gw, go.sum((2, 3)) if m.bias is not None else None)
    return out


def _embedding(
    m: Embedding, x: Tensor, g: Tensor, rows: Sequence[int]
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
    if cls not in RULES:
        return False
    if isinstance(m, Embedding):
        return m.max_norm is None and not m.scale_grad_by_freq and not m.sparse
    if isinstance(m, (Conv1d, Conv2d)):  # one group; numeric padding (im2col's)
        return m.groups == 1 and not isinstance(m.padding, str)
    return True


def per_request(
    captured: Sequence[tuple[Module, Tensor, Tensor | None]], rows: Sequence[int]
) -> list[dict[int, Tensor]]:
    """Each request's parameter gradients, keyed by ``id(parameter)``, from the captured calls
    ``(module, input, gradient of its output)`` of one batch (an output that did not reach the
    backward's root gives None: no gradient)."""
    grads: list[dict[int, Tensor]] = [{} for _ in rows]
    with no_grad():
        for m, x, g in captured:
            if g is None:
                continue
            for mine, pairs in zip(grads, RULES[type(m)](m, x.detach(), g, rows), strict=True):
                for p, gp in pairs:
                    if not p.requires_grad:
                        continue
                    key = id(p)
                    mine[key] = gp if key not in mine else mine[key] + gp
    return grads


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
