"""``ag.viz``: the backward graph of a tensor as Graphviz DOT source.

The optional ``graphviz`` package (``pip install asyncgrad[viz]``, and Graphviz's ``dot``
program) renders it to SVG, PNG, ...; the source works without it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ._tensor import Tensor
from .graph.accumulate_grad import AccumulateGrad
from .graph.node import Node
from .graph.saved_tensor import SavedTensor

__all__ = ["Digraph", "make_dot"]


class Digraph:
    """DOT source of a graph: ``.source``, and ``.render(path, format=...)`` with graphviz."""

    def __init__(self, source: str) -> None:
        self.source = source

    def __str__(self) -> str:
        return self.source

    def __repr__(self) -> str:
        return f"<Digraph of {self.source.count(' -> ')} edges>"

    def render(self, path: str | os.PathLike[str], format: str = "svg") -> str:
        """Write the graph drawn in ``format`` next to ``path`` (as graphviz does: the DOT file at
        ``path``, the drawing at ``path.<format>``); returns the drawing's path.

        Raises:
            ModuleNotFoundError: the optional ``graphviz`` package is not installed.
        """
        try:
            import graphviz
        except ModuleNotFoundError as e:
            raise ModuleNotFoundError(
                "Digraph.render needs the graphviz package (pip install asyncgrad[viz]); "
                "the DOT text is in .source"
            ) from e
        src = graphviz.Source(self.source)
        return str(src.render(os.fspath(path), format=format, cleanup=False))

    def _repr_image_svg_xml(self) -> str:  # Jupyter, when graphviz is installed
        import graphviz

        return str(graphviz.Source(self.source).pipe(format="svg", encoding="utf-8"))


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _shape(shape: Any) -> str:
    return str(tuple(int(d) for d in shape))


def make_dot(
    t: Tensor | tuple[Tensor, ...] | list[Tensor],
    params: Mapping[str, Tensor] | None = None,
    show_saved: bool = False,
) -> Digraph:
    """The backward graph of ``t`` (a tensor or several) as Graphviz DOT source.

    One box per node (its name: ``MulBackward0``, ...), an edge from each node to the nodes its
    gradients flow to, the leaves' ``AccumulateGrad`` labelled with their name from ``params``
    (``dict(model.named_parameters())``, say) and shape, and ``t`` itself with its shape. With
    ``show_saved``, the tensors each node saved for backward, joined to it by dashed edges.

    Args:
        t: the output tensor(s).
        params: names for leaf tensors.
        show_saved: draw the saved tensors.

    Returns:
        A Digraph: ``.source`` is the DOT text; ``.render(path)`` draws it with graphviz.

    Example:
        >>> import asyncgrad as ag
        >>> w = ag.tensor([1.0, 2.0], requires_grad=True)
        >>> g = ag.viz.make_dot((w * 2).sum(), params={"w": w})
        >>> g.source.count(" -> ")
        3
    """
    outs = [t] if isinstance(t, Tensor) else list(t) if isinstance(t, (tuple, list)) else [t]
    for o in outs:
        if not isinstance(o, Tensor):
            raise TypeError(f"make_dot expects a Tensor or tensors, got {type(o).__name__}")
    if params is not None and not isinstance(params, Mapping):
        raise TypeError(
            f"params must map names to tensors (dict(model.named_parameters())), got "
            f"{type(params).__name__}"
        )
    names = {id(v): k for k, v in (params or {}).items()}
    lines = [
        "digraph {",
        '\tgraph [rankdir=BT size="12,12"]',
        "\tnode [align=left fontname=monospace fontsize=10 height=0.2 ranksep=0.1 shape=box "
        "style=filled]",
    ]
    ids: dict[Node, str] = {}

    def node_id(n: Node) -> str:
        nid = ids.get(n)
        if nid is None:
            nid = ids[n] = f"n{len(ids)}"
        return nid

    edges: list[str] = []
    stack: list[Node] = []
    for i, o in enumerate(outs):
        fn = o.grad_fn
        oid = f"out{i}"
        lines.append(f"\t{oid} [label={_quote(_shape(o.shape))} fillcolor=darkolivegreen1]")
        if fn is None:
            continue
        edges.append(f"\t{node_id(fn)} -> {oid}")
        stack.append(fn)
    seen: set[Node] = set()
    n_saved = 0
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        nid = node_id(n)
        if isinstance(n, AccumulateGrad):
            v = n.variable
            name = "" if v is None else names.get(id(v), "")
            shape = "" if v is None else _shape(v.shape)
            label = f"{name}\n{shape}" if name else shape
            lines.append(f"\t{nid} [label={_quote(label)} fillcolor=lightblue]")
        else:
            lines.append(f"\t{nid} [label={_quote(n.name())} fillcolor=lightgrey]")
        if show_saved:
            for label, shape in _saved_of(n):
                sid = f"s{n_saved}"
                n_saved += 1
                text = _quote(label + "\n" + shape)
                lines.append(f"\t{sid} [label={text} fillcolor=orange]")
                edges.append(f"\t{sid} -> {nid} [style=dashed]")
        for e in n._next_edges:
            if e is None:
                continue
            nxt = e[0]
            # The gradient flows from n to nxt; drawn bottom-up, inputs below outputs.
            edges.append(f"\t{node_id(nxt)} -> {nid}")
            stack.append(nxt)
    lines.extend(edges)
    lines.append("}")
    return Digraph("\n".join(lines) + "\n")


def _saved_of(n: Node) -> list[tuple[str, str]]:
    """(label, shape) of the tensors a table op's node saved (none once freed)."""
    spos = getattr(n, "_spos", None)
    saved = getattr(n, "_saved", None)
    if not spos or not isinstance(saved, (list, tuple)):
        return []
    out = []
    for p in spos:
        if p >= len(saved):
            continue
        s = saved[p]
        items = s if isinstance(s, tuple) else (s,)
        for k, sv in enumerate(items):
            if not isinstance(sv, SavedTensor):
                continue
            label = "result" if p == 0 else f"input {p - 1}"
            if isinstance(s, tuple):
                label += f" {k}"
            out.append((label, _shape(sv.array.shape)))
    return out
