"""ag.viz.make_dot: the backward graph as DOT source (parsed minimally here)."""

from __future__ import annotations

import importlib.util
import re
from collections import Counter
from pathlib import Path

import pytest

import asyncgrad as ag
from asyncgrad.viz import make_dot

_NODE = re.compile(r'^\t(\w+) \[label="((?:[^"\\]|\\.)*)" fillcolor=(\w+)\]$')
_EDGE = re.compile(r"^\t(\w+) -> (\w+)( \[style=dashed\])?$")


def parse(source: str) -> tuple[dict[str, tuple[str, str]], list[tuple[str, str, bool]]]:
    """Nodes (id -> (label, colour)) and edges (tail, head, dashed) of make_dot's output."""
    lines = source.splitlines()
    assert lines[0] == "digraph {"
    assert lines[-1] == "}"
    nodes: dict[str, tuple[str, str]] = {}
    edges: list[tuple[str, str, bool]] = []
    for line in lines[1:-1]:
        if m := _NODE.match(line):
            assert m[1] not in nodes, f"node {m[1]} drawn twice"
            nodes[m[1]] = (m[2].replace("\\n", "\n"), m[3])
        elif m := _EDGE.match(line):
            edges.append((m[1], m[2], m[3] is not None))
        else:
            assert line.startswith(("\tgraph ", "\tnode ")), line
    for a, b, _ in edges:
        assert a in nodes
        assert b in nodes
    return nodes, edges


def _mlp() -> tuple[ag.nn.Module, ag.Tensor]:
    ag.manual_seed(0)
    model = ag.nn.Sequential(ag.nn.Linear(4, 3), ag.nn.ReLU(), ag.nn.Linear(3, 1))
    return model, model(ag.randn(2, 4)).sum()


def test_a_known_graph() -> None:
    w = ag.randn(4, 3, requires_grad=True)
    b = ag.zeros(3, requires_grad=True)
    y = (ag.randn(2, 4) @ w + b).relu().sum()
    nodes, edges = parse(make_dot(y, params={"w": w, "b": b}).source)
    labels = Counter(label for label, _ in nodes.values())
    assert labels == Counter(
        {
            "()": 1,  # the output, with its shape
            "SumBackward0": 1,
            "ReluBackward0": 1,
            "AddBackward0": 1,
            "MatmulBackward0": 1,
            "w\n(4, 3)": 1,
            "b\n(3,)": 1,
        }
    )
    assert len(edges) == 6
    by_label = {label: nid for nid, (label, _) in nodes.items()}
    assert (by_label["w\n(4, 3)"], by_label["MatmulBackward0"], False) in edges
    assert (by_label["b\n(3,)"], by_label["AddBackward0"], False) in edges
    assert (by_label["SumBackward0"], by_label["()"], False) in edges
    assert nodes[by_label["w\n(4, 3)"]][1] == "lightblue"


def test_model_parameters_and_shared_nodes() -> None:
    model, loss = _mlp()
    x = ag.tensor([1.0, 2.0], requires_grad=True)
    h = x.exp()
    z = h * h + h  # h's node is reached three times, drawn once
    nodes, edges = parse(make_dot(z).source)
    assert Counter(label for label, _ in nodes.values())["ExpBackward0"] == 1
    assert len(edges) == 1 + 2 + 2 + 1  # to the output, into add, into mul (twice), leaf
    nodes, edges = parse(make_dot(loss, params=dict(model.named_parameters())).source)
    leaves = sorted(label for label, colour in nodes.values() if colour == "lightblue")
    assert leaves == ["0.bias\n(3,)", "0.weight\n(3, 4)", "2.bias\n(1,)", "2.weight\n(1, 3)"]


def test_unnamed_leaves_show_their_shape() -> None:
    x = ag.ones(2, 5, requires_grad=True)
    nodes, _ = parse(make_dot(x.sum()).source)
    assert ("(2, 5)", "lightblue") in nodes.values()


def test_show_saved() -> None:
    x = ag.ones(2, 3, requires_grad=True)
    y = x.exp() * 2.0  # ExpBackward0 saves its result; MulBackward0 saves no tensor
    loss = y.sum()
    nodes, edges = parse(make_dot(loss, show_saved=True).source)
    saved = [nid for nid, (_, colour) in nodes.items() if colour == "orange"]
    assert [nodes[s][0] for s in saved] == ["result\n(2, 3)"]
    exp = next(nid for nid, (label, _) in nodes.items() if label == "ExpBackward0")
    assert (saved[0], exp, True) in edges
    assert sum(dashed for *_, dashed in edges) == 1
    without, _ = parse(make_dot(loss).source)
    assert len(without) == len(nodes) - 1
    loss.backward()  # frees the saved tensors
    after, _ = parse(make_dot(loss, show_saved=True).source)
    assert len(after) == len(without)


def test_several_outputs_and_no_graph() -> None:
    x = ag.tensor([1.0], requires_grad=True)
    nodes, edges = parse(make_dot((x.exp(), x.sin())).source)
    assert (
        sum(label == "(1,)" and colour == "darkolivegreen1" for label, colour in nodes.values())
        == 2
    )
    assert len(edges) == 4
    nodes, edges = parse(make_dot(ag.ones(3)).source)
    assert list(nodes.values()) == [("(3,)", "darkolivegreen1")]
    assert edges == []


def test_bad_arguments() -> None:
    with pytest.raises(TypeError, match="make_dot expects a Tensor or tensors, got int"):
        make_dot(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="params must map names to tensors"):
        make_dot(ag.ones(1), params=[ag.ones(1)])  # type: ignore[arg-type]


def test_render(tmp_path: Path) -> None:
    _, loss = _mlp()
    g = ag.viz.make_dot(loss)
    if importlib.util.find_spec("graphviz") is None:
        with pytest.raises(ModuleNotFoundError, match=r"pip install asyncgrad\[viz\]"):
            g.render(tmp_path / "graph")
        return
    import shutil

    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot program is not installed")
    out = g.render(tmp_path / "graph", format="svg")
    assert Path(out).read_text().lstrip().startswith("<?xml")
