"""Errors, warnings and argument forms where asyncgrad follows torch: each test states torch's
behaviour (observed with torch 2.13) and checks asyncgrad against it; where torch is installed,
the tables are also checked against torch itself.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, Final

import numpy as np
import pytest

import asyncgrad as ag

try:
    import torch
except ImportError:  # the tables below hold torch's answers; torch only re-checks them
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="checks the table against torch itself")

NO_GRAD_VIEW: Final = "A view was created in no_grad mode and is being modified inplace"
VIEW_OF_NO_GRAD_VIEW: Final = "is a view of a view which was created in no_grad mode"
SECOND_TIME: Final = "Trying to backward through the graph a second time"


# ----------------------------------------------------------------------------- .data
def test_data_of_a_leaf_that_requires_grad_must_stay_floating() -> None:
    x = ag.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="data set to a tensor that requires gradients must be"):
        x.data = ag.ones(3, dtype=ag.int64)
    assert x.dtype == ag.float32  # unchanged


def test_data_may_change_dtype_and_shape_as_in_torch() -> None:
    x = ag.zeros(3, requires_grad=True)
    x.data = ag.ones(4, dtype=ag.float64)
    assert x.dtype == ag.float64
    assert x.shape == (4,)
    y = ag.zeros(3)  # needs no gradient: any dtype
    y.data = ag.ones(3, dtype=ag.int64)
    assert y.dtype == ag.int64


# ----------------------------------------------------------------------------- no_grad views
def _nonleaf() -> ag.Tensor:
    return ag.ones(3, 4, requires_grad=True) + 0


def test_inplace_on_a_view_made_under_no_grad_of_a_nonleaf() -> None:
    y = _nonleaf()
    with ag.no_grad():
        v = y[0]
    with pytest.raises(RuntimeError, match=NO_GRAD_VIEW):
        v.mul_(2)
    with pytest.raises(RuntimeError, match=NO_GRAD_VIEW):
        v.add_(1)


def test_inplace_on_a_view_made_under_no_grad_of_a_leaf() -> None:
    x = ag.ones(3, 4, requires_grad=True)
    with ag.no_grad():
        v = x[0]
    with pytest.raises(RuntimeError, match=NO_GRAD_VIEW):  # before the leaf-view error
        v.mul_(2)


def test_inplace_on_views_of_several_kinds_made_under_no_grad() -> None:
    y = _nonleaf()
    with ag.no_grad():
        views = [y.view(12), y.t(), y.split(1)[0], y.unbind(0)[1], y[0:2].reshape(8)]
    for v in views:
        with pytest.raises(RuntimeError, match=NO_GRAD_VIEW):
            v.add_(1)


def test_inplace_on_a_view_of_a_view_made_under_no_grad() -> None:
    y = _nonleaf()
    with ag.no_grad():
        v = y[0]
    vv = v[1:]
    with pytest.raises(RuntimeError, match=f"Output 0 of .* {VIEW_OF_NO_GRAD_VIEW}"):
        vv.mul_(2)
    # setitem writes through a view of the view (torch: "Output 0 of Select is a view of a
    # view ...")
    with pytest.raises(RuntimeError, match=VIEW_OF_NO_GRAD_VIEW):
        v[0] = 5.0


def test_view_of_a_grad_mode_view_made_under_no_grad() -> None:
    y = _nonleaf()
    v = y[0]
    with ag.no_grad():
        vv = v[1:]
    with pytest.raises(RuntimeError, match=NO_GRAD_VIEW):
        vv.mul_(2)


def test_inplace_on_no_grad_view_with_a_value_that_requires_grad() -> None:
    base = ag.ones(3)
    with ag.no_grad():
        v = base[0:2]
    v.mul_(2)  # nothing requires grad: allowed, as in torch
    assert base.tolist() == [2.0, 2.0, 1.0]
    w = ag.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match=NO_GRAD_VIEW):
        v.mul_(w)
    assert base.tolist() == [2.0, 2.0, 1.0]  # nothing written


def test_no_grad_views_allowed_where_torch_allows_them() -> None:
    y = _nonleaf()
    with ag.no_grad():
        v = y[0]
        v.mul_(2)  # both under no_grad
    v.detach().add_(1)  # a detached alias is no view of y
    x = ag.ones(3, 4, requires_grad=True)
    y2 = x + 0
    v2 = y2[0]  # made with grad mode on: recorded, and its gradient reaches x
    v2.mul_(2)
    y2.sum().backward()
    assert x.grad is not None
    assert x.grad.tolist()[0] == [2.0] * 4


@needs_torch
def test_no_grad_view_cases_match_torch() -> None:
    def cases(m: Any) -> list[str]:
        out = []
        for make in (
            lambda: (m.ones(3, 4, requires_grad=True) + 0, False),
            lambda: (m.ones(3, 4, requires_grad=True), False),
            lambda: (m.ones(3, 4), False),
            lambda: (m.ones(3, 4), True),
        ):
            y, other_grad = make()
            with m.no_grad():
                v = y[0]
            w = m.ones(4, requires_grad=True) if other_grad else 2.0
            try:
                v.mul_(w)
                out.append("ok")
            except RuntimeError as e:
                out.append("no_grad view" if "no_grad mode" in str(e) else "other")
        return out

    assert cases(ag) == cases(torch)


# ----------------------------------------------------------------------------- second backward
def _idx(m: Any) -> Any:
    return m.tensor([0, 2])


def _setitem_adv(m: Any, x: Any) -> Any:
    y = x + 0
    y[_idx(m)] = 5.0
    return y


def _setitem_adv_tensor(m: Any, x: Any) -> Any:
    y = x + 0
    y[_idx(m)] = x[0:2] + 0
    return y


def _setitem_basic(m: Any, x: Any) -> Any:
    y = x + 0
    y[0] = 5.0
    return y


def _setitem_slice_tensor(m: Any, x: Any) -> Any:
    y = x + 0
    y[0:1] = x[1:2] + 0
    return y


def _view_inplace(m: Any, x: Any) -> Any:
    y = x + 0
    y[0].add_(1.0)
    return y


# op -> (fn(m, x) with x a 3 x 4 float64 leaf, whether torch raises on a second backward).
# torch frees what a node saved after one backward: tensors, Python numbers it saves as
# tensors, index tensors; nodes that keep only sizes or nothing backward again without error.
SECOND: Final[dict[str, tuple[Callable[[Any, Any], Any], bool]]] = {
    "add": (lambda m, x: x + x, False),
    "add_scalar": (lambda m, x: x + 2, False),
    "sub": (lambda m, x: x - 1, False),
    "rsub": (lambda m, x: 2.0 - x, False),
    "neg": (lambda m, x: -x, False),
    "mul": (lambda m, x: x * x, True),
    "mul_scalar": (lambda m, x: x * 2.0, True),
    "mul_constant_tensor": (lambda m, x: x * m.ones(3, 4, dtype=m.float64), True),
    "div": (lambda m, x: x / x, True),
    "div_scalar": (lambda m, x: x / 2.0, True),
    "rdiv": (lambda m, x: 2.0 / x, True),
    "pow": (lambda m, x: x**2, True),
    "pow_scalar_base": (lambda m, x: 2.0**x, True),
    "remainder": (lambda m, x: x % 1.5, False),
    "exp": (lambda m, x: x.exp(), True),
    "log": (lambda m, x: x.log(), True),
    "sqrt": (lambda m, x: x.sqrt(), True),
    "sin": (lambda m, x: x.sin(), True),
    "tanh": (lambda m, x: x.tanh(), True),
    "sigmoid": (lambda m, x: x.sigmoid(), True),
    "relu": (lambda m, x: x.relu(), True),
    "abs": (lambda m, x: x.abs(), True),
    "sign": (lambda m, x: x.sign(), False),
    "erf": (lambda m, x: x.erf(), True),
    "clamp": (lambda m, x: x.clamp(0.5, 2.0), True),
    "minimum": (lambda m, x: m.minimum(x, x * 2), True),
    "sum": (lambda m, x: x.sum(), False),
    "sum_dim": (lambda m, x: x.sum(0, keepdim=True), False),
    "mean": (lambda m, x: x.mean(), False),
    "mean_dim": (lambda m, x: x.mean(1), False),
    "amax": (lambda m, x: m.amax(x, 1), True),
    "max": (lambda m, x: x.max(), True),
    "max_dim": (lambda m, x: x.max(1).values, True),
    "logsumexp": (lambda m, x: x.logsumexp(1), True),
    "var": (lambda m, x: x.var(), True),
    "std": (lambda m, x: x.std(1), True),
    "prod": (lambda m, x: x.prod(1), True),
    "norm": (lambda m, x: x.norm(), True),
    "cumsum": (lambda m, x: x.cumsum(1), False),
    "reshape": (lambda m, x: x.reshape(-1), False),
    "view": (lambda m, x: x.view(-1), False),
    "flatten": (lambda m, x: x.flatten(), False),
    "unsqueeze": (lambda m, x: x.unsqueeze(0), False),
    "squeeze": (lambda m, x: x[None].squeeze(0), False),
    "t": (lambda m, x: x.t(), False),
    "permute": (lambda m, x: x.permute(1, 0), False),
    "expand": (lambda m, x: x[None].expand(2, 3, 4), False),
    "slice": (lambda m, x: x[1:], False),
    "select": (lambda m, x: x[1], False),
    "narrow": (lambda m, x: x.narrow(1, 1, 2), False),
    "advanced_index": (lambda m, x: x[_idx(m)], True),
    "mask_index": (lambda m, x: x[x > 1], True),
    "gather": (lambda m, x: x.gather(1, m.tensor([[0], [1], [2]])), True),
    "index_select": (lambda m, x: x.index_select(1, _idx(m)), True),
    "embedding": (lambda m, x: m.nn.functional.embedding(m.tensor([0, 2]), x), True),
    "scatter_add": (lambda m, x: x.scatter_add(1, m.tensor([[0], [1], [2]]), x[:, :1]), True),
    "setitem_advanced": (_setitem_adv, True),
    "setitem_advanced_tensor": (_setitem_adv_tensor, True),
    "setitem_basic": (_setitem_basic, True),
    "setitem_slice_tensor": (_setitem_slice_tensor, True),
    "inplace_on_a_view": (_view_inplace, True),
    "add_": (lambda m, x: (x + 0).add_(1.0), False),
    "mul_": (lambda m, x: (x + 0).mul_(x), True),
    "relu_": (lambda m, x: (x + 0).relu_(), True),
    "fill_": (lambda m, x: (x + 0).fill_(2.0), False),
    "copy_": (lambda m, x: (x + 0).copy_(x[0]), False),
    "clamp_": (lambda m, x: (x + 0).clamp_(0.5, 2.0), True),
    "masked_fill": (lambda m, x: x.masked_fill(x > 1, 0.0), True),
    "masked_fill_": (lambda m, x: (x + 0).masked_fill_(x > 1, 0.0), True),
    "where": (lambda m, x: m.where(x > 1, x, 0.0), True),
    "tril": (lambda m, x: m.tril(x), False),
    "triu": (lambda m, x: x.triu(1), False),
    "matmul": (lambda m, x: x @ x.t(), True),
    "dot": (lambda m, x: m.dot(x[0], x[1]), True),
    "outer": (lambda m, x: m.outer(x[0], x[1]), True),
    "einsum": (lambda m, x: m.einsum("ij,kj->ik", x, x), True),
    "cat": (lambda m, x: m.cat([x, x]), False),
    "stack": (lambda m, x: m.stack([x, x]), False),
    "split": (lambda m, x: x.split(2, 1)[0], False),
    "unbind": (lambda m, x: x.unbind(0)[1], False),
    "sort": (lambda m, x: x.sort(1).values, True),
    "topk": (lambda m, x: x.topk(2).values, True),
    "clone": (lambda m, x: x.clone(), False),
    "to_float32": (lambda m, x: x.to(m.float32), False),
    "repeat": (lambda m, x: x.repeat(2, 1), False),
    "flip": (lambda m, x: m.flip(x, (0,)), False),
    "roll": (lambda m, x: m.roll(x, 1, 0), False),
    "pad_constant": (lambda m, x: m.nn.functional.pad(x, (1, -1, 2, 0), value=2.0), False),
    "pad_reflect": (lambda m, x: m.nn.functional.pad(x, (2, 1), mode="reflect"), True),
    "pad_replicate": (lambda m, x: m.nn.functional.pad(x[None], (2, 1), mode="replicate"), True),
    "pad_circular": (lambda m, x: m.nn.functional.pad(x[None], (2, 1), mode="circular"), True),
    "softmax": (lambda m, x: m.nn.functional.softmax(x, 1), True),
    "log_softmax": (lambda m, x: m.nn.functional.log_softmax(x, 1), True),
    "cross_entropy": (lambda m, x: m.nn.functional.cross_entropy(x, m.tensor([0, 1, 2])), True),
    "nll_loss": (lambda m, x: m.nn.functional.nll_loss(x, m.tensor([0, 1, 2])), True),
    "linear": (lambda m, x: m.nn.functional.linear(x, x), True),
    "gelu": (lambda m, x: m.nn.functional.gelu(x), True),
    "silu": (lambda m, x: m.nn.functional.silu(x), True),
    "softplus": (lambda m, x: m.nn.functional.softplus(x), True),
    "layer_norm": (lambda m, x: m.nn.functional.layer_norm(x, (4,)), True),
    "conv2d": (
        lambda m, x: m.nn.functional.conv2d(x.reshape(1, 1, 3, 4), x[:2, :2].reshape(1, 1, 2, 2)),
        True,
    ),
    "max_pool2d": (lambda m, x: m.nn.functional.max_pool2d(x.reshape(1, 1, 3, 4), 2), True),
}


def _second_backward_raises(m: Any, name: str) -> bool:
    x = m.tensor(np.arange(12.0).reshape(3, 4) / 4 + 0.5, dtype=m.float64, requires_grad=True)
    out = SECOND[name][0](m, x).sum()
    out.backward()
    try:
        out.backward()
    except RuntimeError as e:
        if SECOND_TIME not in str(e):
            raise
        return True
    return False


@pytest.mark.parametrize("name", list(SECOND))
def test_second_backward_raises_where_torch_does(name: str) -> None:
    assert _second_backward_raises(ag, name) == SECOND[name][1]


@needs_torch
@pytest.mark.parametrize("name", list(SECOND))
def test_second_backward_table_is_torchs(name: str) -> None:
    assert _second_backward_raises(torch, name) == SECOND[name][1]


def test_second_backward_through_index_put_names_the_node() -> None:
    x = ag.ones(4, requires_grad=True)
    y = x + 0
    y[ag.tensor([1, 3])] = 2.0
    loss = y.sum()
    loss.backward()
    with pytest.raises(RuntimeError, match=f"{SECOND_TIME}.*IndexPutBackward0"):
        loss.backward()
    # retain_graph keeps it, as in torch
    y = x + 0
    y[ag.tensor([1, 3])] = 2.0
    loss = y.sum()
    loss.backward(retain_graph=True)
    loss.backward()
    assert x.grad is not None
    assert x.grad.tolist() == [3.0, 0.0, 3.0, 0.0]


# ----------------------------------------------------------------------------- decorating classes
CLASS_DECORATED: Final = "Decorating classes is deprecated and will be disabled in future versions"


@pytest.mark.parametrize(
    "mode",
    [
        lambda c: ag.no_grad()(c),
        lambda c: ag.no_grad(c),
        lambda c: ag.enable_grad()(c),
        lambda c: ag.inference_mode()(c),
        lambda c: ag.inference_mode(c),
        lambda c: ag.set_grad_enabled(False)(c),
    ],
    ids=["no_grad()", "no_grad", "enable_grad()", "inference_mode()", "inference_mode", "set"],
)
def test_decorating_a_class_warns_as_torch(mode: Callable[[type], Any]) -> None:
    class A:
        def __init__(self) -> None:
            self.grad_enabled = ag.is_grad_enabled()

    with pytest.warns(FutureWarning, match=CLASS_DECORATED) as record:
        decorated = mode(A)
    assert record[0].filename == __file__  # points at the decorating line
    with ag.set_grad_enabled(True):
        a = decorated()
    assert isinstance(a, A)


def test_decorating_functions_does_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")

        @ag.no_grad()
        def f() -> bool:
            return ag.is_grad_enabled()

        @ag.no_grad
        def g() -> bool:
            return ag.is_grad_enabled()

    assert not f()
    assert not g()


# ----------------------------------------------------------------------------- non-leaf .grad
NON_LEAF_GRAD: Final = "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed"


def test_reading_a_nonleaf_grad_warns() -> None:
    x = ag.ones(2, requires_grad=True)
    y = x * 2
    with pytest.warns(UserWarning, match=NON_LEAF_GRAD) as record:
        assert y.grad is None
    assert record[0].filename == __file__
    v = x[0]  # a view of a leaf that requires grad is no leaf
    with pytest.warns(UserWarning, match=NON_LEAF_GRAD):
        assert v.grad is None


def test_no_warning_where_torch_gives_none() -> None:
    x = ag.ones(2, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert x.grad is None  # a leaf
        assert ag.ones(2).grad is None  # needs no gradient
        assert ag.ones(2)[0].grad is None  # a view of a tensor that needs none
        with ag.no_grad():
            z = x * 2
        assert z.grad is None  # made under no_grad: a leaf
        y = x * 2
        y.retain_grad()
        assert y.grad is None
        y.sum().backward()
        assert y.grad is not None
        assert y.grad.tolist() == [1.0, 1.0]


@needs_torch
def test_nonleaf_grad_warnings_match_torch() -> None:
    def warned(m: Any) -> list[bool]:
        out = []
        x = m.ones(2, requires_grad=True)
        y = x * 2
        r = x * 3
        r.retain_grad()
        with m.no_grad():
            z = x * 2
        for t in (x, y, r, z, x[0], m.ones(2)):
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                t.grad  # noqa: B018
            out.append(any("not a leaf Tensor" in str(i.message) for i in w))
        return out

    assert warned(ag) == warned(torch)


# ----------------------------------------------------------------------------- numpy(), no_grad
def test_numpy_of_a_tensor_that_requires_grad_under_no_grad() -> None:
    x = ag.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="Can't call numpy\\(\\) on Tensor that requires grad"):
        x.numpy()
    with ag.no_grad():
        a = x.numpy()  # torch allows it: nothing can record under no_grad
    assert a.tolist() == [1.0, 1.0, 1.0]
    a[0] = 5.0  # shares memory, as torch's
    assert x.tolist()[0] == 5.0


# ----------------------------------------------------------------------------- randint
def test_randint_high_size() -> None:
    ag.manual_seed(0)
    r = ag.randint(5, (1000,))
    assert r.shape == (1000,)
    assert r.dtype == ag.int64
    assert r.min().item() == 0
    assert r.max().item() == 4


def test_randint_low_high_size_and_keywords() -> None:
    r = ag.randint(3, 5, (1000,))
    assert set(r.tolist()) == {3, 4}
    assert set(ag.randint(3, 5, size=(100,)).tolist()) == {3, 4}
    assert set(ag.randint(low=3, high=5, size=(100,)).tolist()) == {3, 4}
    assert set(ag.randint(high=2, size=(100,)).tolist()) == {0, 1}
    assert ag.randint(7, size=(2, 3)).shape == (2, 3)
    f = ag.randint(10, (4,), dtype=ag.float32)
    assert f.dtype == ag.float32
    g1, g2 = ag.Generator(), ag.Generator()
    g1.manual_seed(3)
    g2.manual_seed(3)
    assert (
        ag.randint(100, (8,), generator=g1).tolist() == ag.randint(100, (8,), generator=g2).tolist()
    )


def test_randint_errors_as_torch() -> None:
    with pytest.raises(TypeError, match="size"):
        ag.randint(3, 5)  # torch: argument 'size' must be tuple of ints, not int
    with pytest.raises(TypeError, match="size"):
        ag.randint(5)
    with pytest.raises(RuntimeError, match="random_ expects 'from' to be less than 'to'"):
        ag.randint(5, 3, (2,))


@needs_torch
def test_randint_forms_match_torch() -> None:
    for m in (ag, torch):
        assert tuple(m.randint(5, (3,)).shape) == (3,)
        assert set(m.randint(3, 5, (200,)).tolist()) == {3, 4}
        with pytest.raises(TypeError):
            m.randint(3, 5)


# ----------------------------------------------------------------------------- expanded views
def test_setitem_through_an_expanded_view_writes_the_base() -> None:
    x = ag.zeros(1, 3)
    e = x.expand(2, 3)
    e[0] = 5.0  # the row has no repeated element: allowed, and it is x's row (torch's result)
    assert x.tolist() == [[5.0, 5.0, 5.0]]
    e[1, 2] = 7.0
    e[0].add_(1.0)
    assert x.tolist() == [[6.0, 6.0, 8.0]]
    assert e.tolist() == [[6.0, 6.0, 8.0]] * 2


def test_writes_where_expanded_elements_share_memory_are_refused() -> None:
    x = ag.zeros(1, 3)
    e = x.expand(2, 3)
    for write in (
        lambda: e.add_(1.0),
        lambda: e.copy_(ag.ones(2, 3)),
        lambda: e.__setitem__((slice(None), 0), 5.0),
    ):
        with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
            write()
    assert x.tolist() == [[0.0, 0.0, 0.0]]


def test_expand_then_setitem_on_a_clone_in_a_hook() -> None:
    x = ag.ones(3, requires_grad=True)
    seen: list[list[list[float]]] = []

    def hook(g: ag.Tensor) -> ag.Tensor:
        c = g.clone()
        e = c.expand(2, 3)
        e[1, 0] = 0.0  # writes c[0], as in torch
        seen.append(e.tolist())
        return c

    x.register_hook(hook)
    (x * 2).sum().backward()
    assert seen == [[[0.0, 2.0, 2.0], [0.0, 2.0, 2.0]]]
    assert x.grad is not None
    assert x.grad.tolist() == [0.0, 2.0, 2.0]


def test_recorded_write_through_an_expanded_view_is_refused() -> None:
    # torch routes this gradient through the expansion; asyncgrad's CopySlices does not, so it
    # refuses the write with a clear error instead of computing a wrong gradient.
    x = ag.ones(1, 3, requires_grad=True)
    e = (x * 1).expand(2, 3)
    with pytest.raises(RuntimeError, match="expanded view of a tensor that requires grad"):
        e[0] = 5.0


@needs_torch
def test_expanded_writes_match_torch() -> None:
    def outcome(m: Any, write: Callable[[Any], Any]) -> Any:
        x = m.zeros(1, 3)
        try:
            write(x.expand(2, 3))
        except RuntimeError:
            return "raise"
        return x.tolist()

    writes = [
        lambda e: e.__setitem__(0, 5.0),
        lambda e: e.__setitem__((1, 2), 5.0),
        lambda e: e[0].mul_(2.0),
        lambda e: e.t()[0].__setitem__(0, 3.0),
        lambda e: e.add_(1.0),
        lambda e: e.__setitem__((slice(None), 0), 5.0),
    ]
    for w in writes:
        assert outcome(ag, w) == outcome(torch, w)
