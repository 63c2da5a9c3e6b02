"""Finite-difference checks of gradients (float64), public for users as in torch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import backend, dtypes
from .._tensor import Tensor
from ..graph.grad_mode import enable_grad, no_grad
from .api import grad_sync

__all__ = ["GradcheckError", "gradcheck", "gradgradcheck"]


class GradcheckError(RuntimeError):
    """Raised by gradcheck when an analytical gradient disagrees with finite differences."""


def _as_tuple(x: Any) -> tuple[Any, ...]:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _block(o: Tensor, x: Any) -> Any:
    """A zero Jacobian block d o / d x, or None if x is not a differentiable input."""
    if isinstance(x, Tensor) and x.requires_grad:
        return backend.zeros((o.numel(), x.numel()), dtypes.float64)
    return None


def _host64(a: Any) -> Any:
    """A float64 copy of ``a`` on the host, flattened."""
    return backend.to_device(a, backend.CPU).astype(dtypes.float64).reshape(-1)


def _diff_outputs(func: Callable[..., Any], inputs: tuple[Any, ...]) -> list[Tensor]:
    outs = _as_tuple(func(*inputs))
    return [o for o in outs if isinstance(o, Tensor) and o.dtype.kind in "fc"]


def numerical_jacobian(
    func: Callable[..., Any], inputs: tuple[Any, ...], eps: float
) -> list[list[Any]]:
    """J[o][i] has shape (out_o.size, in_i.size): d out_o / d in_i by central differences."""
    with no_grad():
        outs0 = _diff_outputs(func, inputs)
    jac = [[_block(o, x) for x in inputs] for o in outs0]
    for i, x in enumerate(inputs):
        if not (isinstance(x, Tensor) and x.requires_grad):
            continue
        flat = x._array.reshape(-1)  # a view: perturbing it perturbs x
        for j in range(flat.size):
            orig = flat[j].copy()
            with no_grad():
                flat[j] = orig + eps
                plus = [_host64(o._array) for o in _diff_outputs(func, inputs)]
                flat[j] = orig - eps
                minus = [_host64(o._array) for o in _diff_outputs(func, inputs)]
                flat[j] = orig
            for k in range(len(outs0)):
                jac[k][i][:, j] = (plus[k] - minus[k]) / (2 * eps)
    return jac


def analytical_jacobian(func: Callable[..., Any], inputs: tuple[Any, ...]) -> list[list[Any]]:
    outs = _diff_outputs(func, inputs)
    diff_in = [x for x in inputs if isinstance(x, Tensor) and x.requires_grad]
    jac: list[list[Any]] = []
    for o in outs:
        rows: list[Any] = [_block(o, x) for x in inputs]
        if o.requires_grad:
            for k in range(o.numel()):
                go = backend.zeros((o.numel(),), o.dtype, o.device)
                go[k] = 1
                grads = grad_sync(
                    o,
                    diff_in,
                    Tensor._wrap(go.reshape(o.shape)),
                    retain_graph=True,
                    allow_unused=True,
                )
                gi = iter(grads)
                for i, x in enumerate(inputs):
                    if isinstance(x, Tensor) and x.requires_grad:
                        g = next(gi)
                        if g is not None:
                            rows[i][k, :] = _host64(g._array)
        jac.append(rows)
    return jac


def gradcheck(
    func: Callable[..., Any],
    inputs: Any,
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
    check_batched_grad: bool = False,
    fast_mode: bool = False,
) -> bool:
    """Compare ``func``'s analytical Jacobian with central finite differences.

    Inputs that require grad should be float64 (float32 differences are too coarse).
    ``check_batched_grad=True`` also checks vector-Jacobian products with random (non-basis)
    grad_outputs against the numerical Jacobian, one vector at a time: asyncgrad has no vmap,
    so a batch of grad_outputs is a loop (See NOTE [Gradcheck options]). ``fast_mode=True``
    runs the full check (torch's fast mode checks a random projection; the full check is at
    least as strict).

    Example:
        >>> import asyncgrad as ag
        >>> x = ag.randn(3, dtype=ag.float64, requires_grad=True)
        >>> ag.autograd.gradcheck(lambda t: (t * t).sum(), (x,))
        True
    """
    inputs = _as_tuple(inputs)
    for i, x in enumerate(inputs):
        if isinstance(x, Tensor) and x.requires_grad and x.dtype != dtypes.float64:
            raise GradcheckError(
                f"gradcheck: input {i} requires grad but is {x.dtype}; use float64 inputs"
            )
    num = numerical_jacobian(func, inputs, eps)
    ana = analytical_jacobian(func, inputs)
    for o, (nrow, arow) in enumerate(zip(num, ana, strict=False)):
        for i, (n, a) in enumerate(zip(nrow, arow, strict=False)):
            if n is None:
                continue
            if not backend.allclose(a, n, rtol=rtol, atol=atol):
                if not raise_exception:
                    return False
                raise GradcheckError(
                    f"Jacobian mismatch for output {o} with respect to input {i},\n"
                    f"numerical:{n}\nanalytical:{a}\n"
                )
    if check_batched_grad:
        return _check_vjps(func, inputs, num, rtol, atol, raise_exception)
    return True


# NOTE [Gradcheck options]
# torch's check_batched_grad computes the gradients for a batch of grad_outputs with vmap and
# compares them with computing them one by one. asyncgrad has no vmap, so a batch of
# grad_outputs is always computed one by one; the option instead checks that the backward is
# right for grad_outputs that are not basis vectors (the Jacobian check uses only those): for a
# few random vectors v, grad(func(inputs), inputs, v) must equal v @ J from finite differences.
# fast_mode is accepted and runs the full check.
_BATCH = 2  # random grad_outputs per check


def _check_vjps(
    func: Callable[..., Any],
    inputs: tuple[Any, ...],
    num: list[list[Any]],
    rtol: float,
    atol: float,
    raise_exception: bool,
) -> bool:
    outs = _diff_outputs(func, inputs)
    diff_idx = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]
    pairs = [(k, o) for k, o in enumerate(outs) if o.requires_grad]
    if not pairs or not diff_idx:
        return True
    rng = backend.RandomState(0)
    for b in range(_BATCH):
        vs = [rng.normal((o.numel(),), dtypes.float64) for _, o in pairs]
        grads = grad_sync(
            [o for _, o in pairs],
            [inputs[i] for i in diff_idx],
            [
                Tensor._wrap(backend.on_device(v.reshape(o.shape).astype(o.dtype), o.device))
                for v, (_, o) in zip(vs, pairs, strict=True)
            ],
            retain_graph=True,
            allow_unused=True,
        )
        for i, g in zip(diff_idx, grads, strict=True):
            expected = sum(v @ num[k][i] for v, (k, _) in zip(vs, pairs, strict=True))
            got = (
                backend.zeros((inputs[i].numel(),), dtypes.float64)
                if g is None
                else _host64(g._array)
            )
            if not backend.allclose(got, expected, rtol=rtol, atol=atol):
                if not raise_exception:
                    return False
                raise GradcheckError(
                    f"check_batched_grad: the gradient with respect to input {i} for random "
                    f"grad_outputs (vector {b}) disagrees with the numerical Jacobian,\n"
                    f"numerical:{expected}\nanalytical:{got}\n"
                )
    return True


def gradgradcheck(
    func: Callable[..., Any],
    inputs: Any,
    grad_outputs: Any = None,
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
    check_batched_grad: bool = False,
    fast_mode: bool = False,
) -> bool:
    """Check second derivatives: gradcheck of ``grad(func(inputs), inputs, v, create_graph=True)``
    with respect to both ``inputs`` and the vector ``v`` (random when not given).
    ``check_batched_grad`` and ``fast_mode`` as gradcheck's."""
    inputs = _as_tuple(inputs)
    with no_grad():
        outs0 = _diff_outputs(func, inputs)
    if grad_outputs is None:
        rng = backend.RandomState(0)
        grad_outputs = tuple(
            Tensor._wrap(backend.on_device(rng.normal(o.shape, o.dtype), o.device)).requires_grad_()
            for o in outs0
        )
    grad_outputs = _as_tuple(grad_outputs)
    n_in = len(inputs)
    diff_idx = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]

    def first_grads(*args: Any) -> tuple[Any, ...]:
        # With grad enabled even where the finite differences call it under no_grad: its
        # outputs are gradients, which exist only if func's graph is recorded.
        with enable_grad():
            return _first_grads(args[:n_in], args[n_in:])

    def _first_grads(ins: tuple[Any, ...], vs: tuple[Any, ...]) -> tuple[Any, ...]:
        outs = _diff_outputs(func, ins)
        pairs = [(o, v) for o, v in zip(outs, vs, strict=False) if o.requires_grad]
        if not pairs:
            return ()
        gs = grad_sync(
            [p[0] for p in pairs],
            [ins[i] for i in diff_idx],
            [p[1] for p in pairs],
            create_graph=True,
            allow_unused=True,
            materialize_grads=True,
        )
        return tuple(g for g in gs if g is not None)

    return gradcheck(
        first_grads,
        (*inputs, *grad_outputs),
        eps=eps,
        atol=atol,
        rtol=rtol,
        raise_exception=raise_exception,
        check_batched_grad=check_batched_grad,
        fast_mode=fast_mode,
    )
