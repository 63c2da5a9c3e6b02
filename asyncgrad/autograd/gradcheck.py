"""Finite-difference checks of gradients (float64), public for users as in torch."""

from __future__ import annotations

import warnings
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
    return _jacobian_and_grads(func, inputs)[0]


def _jacobian_and_grads(
    func: Callable[..., Any], inputs: tuple[Any, ...]
) -> tuple[list[list[Any]], list[tuple[int, Tensor]]]:
    outs = _diff_outputs(func, inputs)
    diff_in = [x for x in inputs if isinstance(x, Tensor) and x.requires_grad]
    jac: list[list[Any]] = []
    some: dict[int, Tensor] = {}
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
                            some.setdefault(i, g)
        jac.append(rows)
    return jac, sorted(some.items())


def _check_inputs(inputs: tuple[Any, ...]) -> None:
    """torch's checks of gradcheck's inputs: one requires grad, a warning for each that is not
    double precision, and no expanded (stride 0) input, whose finite differences would perturb
    several elements at once."""
    diff = [(i, x) for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]
    if not diff:
        raise ValueError(
            "gradcheck expects at least one input tensor to require gradient, but none of "
            "them have requires_grad=True."
        )
    for i, x in diff:
        if x.dtype.kind not in "fc" or x.dtype.itemsize < (8 if x.dtype.kind == "f" else 16):
            warnings.warn(
                f"Input #{i} requires gradient and is not a double precision floating point or "
                "complex. This check will likely fail if all the inputs are not of double "
                "precision floating point or complex. ",
                UserWarning,
                stacklevel=3,
            )
        a = x._array
        if a.size and any(st == 0 and n > 1 for st, n in zip(a.strides, a.shape, strict=True)):
            raise RuntimeError(
                f"The {i}th input has a dimension with stride 0. gradcheck only supports inputs "
                "that are non-overlapping to be able to compute the numerical gradients "
                "correctly. You should call .contiguous on the input before passing it to "
                "gradcheck."
            )


def _fail(raise_exception: bool, msg: str) -> bool:
    if raise_exception:
        raise GradcheckError(msg)
    return False


def gradcheck(
    func: Callable[..., Any],
    inputs: Any,
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
    nondet_tol: float = 0.0,
    check_undefined_grad: bool = True,
    check_grad_dtypes: bool = False,
    check_batched_grad: bool = False,
    check_batched_forward_grad: bool = False,
    check_forward_ad: bool = False,
    check_backward_ad: bool = True,
    fast_mode: bool = False,
    masked: bool | None = None,
) -> bool:
    """Compare ``func``'s analytical Jacobian with central finite differences, as torch's.

    Inputs that require grad should be float64 (others get torch's warning: float32 differences
    are too coarse). Every backward runs twice, and the two must agree within ``nondet_tol``
    (torch's reentrancy check). ``check_undefined_grad`` checks that the backward takes outputs
    that get no gradient (See NOTE [Gradcheck options]); ``check_grad_dtypes`` that each gradient
    has its input's dtype and device. ``check_batched_grad=True`` also checks vector-Jacobian
    products with random (non-basis) grad_outputs. ``fast_mode=True`` runs the full check
    (torch's fast mode checks a random projection; the full check is at least as strict).
    Forward-mode checks are not built (asyncgrad has no forward-mode AD yet).

    Example:
        >>> import asyncgrad as ag
        >>> x = ag.randn(3, dtype=ag.float64, requires_grad=True)
        >>> ag.autograd.gradcheck(lambda t: (t * t).sum(), (x,))
        True
    """
    if not check_forward_ad and not check_backward_ad:
        raise AssertionError(  # torch's is an assert too
            "Expected at least one of check_forward_ad or check_backward_ad to be True"
        )
    if check_forward_ad or check_batched_forward_grad:
        raise NotImplementedError(
            "gradcheck(check_forward_ad=True / check_batched_forward_grad=True): asyncgrad has no "
            "forward-mode AD yet; only the backward (reverse-mode) checks run"
        )
    if masked:
        raise NotImplementedError("gradcheck(masked=True): asyncgrad has no sparse tensors")
    inputs = _as_tuple(inputs)
    _check_inputs(inputs)
    num = numerical_jacobian(func, inputs, eps)
    ana, again, grads = _analytical(func, inputs)
    outs = _diff_outputs(func, inputs)
    for o, (nrow, arow) in enumerate(zip(num, ana, strict=False)):
        for i, (n, a) in enumerate(zip(nrow, arow, strict=False)):
            if n is None:
                continue
            if not outs[o].requires_grad:
                if backend.allclose(n, 0 * n, rtol=0.0, atol=atol):
                    continue
                return _fail(raise_exception, "Numerical gradient for function expected to be zero")
            if not backend.allclose(a, n, rtol=rtol, atol=atol):
                return _fail(
                    raise_exception,
                    f"Jacobian mismatch for output {o} with respect to input {i},\n"
                    f"numerical:{n}\nanalytical:{a}\n",
                )
    for arow, brow in zip(ana, again, strict=False):
        for a, b in zip(arow, brow, strict=False):
            if a is not None and not backend.allclose(a, b, rtol=0.0, atol=nondet_tol):
                return _fail(
                    raise_exception,
                    "Backward is not reentrant, i.e., running backward with same input and "
                    "grad_output multiple times gives different values, although analytical "
                    "gradient matches numerical gradient.The tolerance for nondeterminism was "
                    f"{nondet_tol}.",
                )
    if check_grad_dtypes:
        for i, g in grads:
            x = inputs[i]
            if g.dtype != x.dtype:
                return _fail(raise_exception, "Gradient has dtype mismatch")
            if g.device != x.device:
                return _fail(raise_exception, "Gradient has device mismatch")
    if check_batched_grad and not _check_vjps(func, inputs, num, rtol, atol, raise_exception):
        return False
    if not _zero_in_zero_out(func, inputs, raise_exception):
        return False
    return not check_undefined_grad or _undefined_grads_ok(func, inputs, raise_exception)


def _zero_in_zero_out(
    func: Callable[..., Any], inputs: tuple[Any, ...], raise_exception: bool
) -> bool:
    """torch's check that the backward multiplies by grad_output: zero in, zero out."""
    diff_in = [x for x in inputs if isinstance(x, Tensor) and x.requires_grad]
    outs = [o for o in _diff_outputs(func, inputs) if o.requires_grad]
    if not outs:
        return True
    gs = grad_sync(
        outs,
        diff_in,
        [Tensor._wrap(backend.full_like(o._array, 0)) for o in outs],
        allow_unused=True,
    )
    if any(g is not None and bool((g._array != 0).any()) for g in gs):
        return _fail(raise_exception, "backward not multiplied by grad_output")
    return True


def _analytical(
    func: Callable[..., Any], inputs: tuple[Any, ...]
) -> tuple[list[list[Any]], list[list[Any]], list[tuple[int, Tensor]]]:
    """The analytical Jacobian twice (torch's reentrancy check compares them), and one
    gradient per input that got one (for the dtype check)."""
    first, grads = _jacobian_and_grads(func, inputs)
    second, _ = _jacobian_and_grads(func, inputs)
    return first, second, grads


def _undefined_grads_ok(
    func: Callable[..., Any], inputs: tuple[Any, ...], raise_exception: bool
) -> bool:
    """See NOTE [Gradcheck options]: with several outputs, each may get no gradient at all."""
    diff_in = [x for x in inputs if isinstance(x, Tensor) and x.requires_grad]
    outs = [o for o in _diff_outputs(func, inputs) if o.requires_grad]
    for skip in range(len(outs) if len(outs) > 1 else 0):
        case = [o for k, o in enumerate(outs) if k != skip]
        try:
            grad_sync(
                case,
                diff_in,
                [Tensor._wrap(backend.full_like(o._array, 0)) for o in case],
                retain_graph=True,
                allow_unused=True,
            )
        except (RuntimeError, TypeError) as e:
            if raise_exception:
                raise GradcheckError(
                    "Expected backward function to handle undefined output grads. Please look at "
                    '"Notes about undefined output gradients" in "tools/autograd/derivatives.yaml"'
                ) from e
            return False
    return True


# NOTE [Gradcheck options]
# torch's check_batched_grad computes the gradients for a batch of grad_outputs with vmap and
# compares them with computing them one by one. asyncgrad has no vmap, so a batch of
# grad_outputs is always computed one by one; the option instead checks that the backward is
# right for grad_outputs that are not basis vectors (the Jacobian check uses only those): for a
# few random vectors v, grad(func(inputs), inputs, v) must equal v @ J from finite differences.
# fast_mode is accepted and runs the full check.
#
# check_undefined_grad: torch marks output gradients undefined with an internal node; here an
# output that gets no gradient is one left out of the pass. With several outputs, each in turn
# is left out and the backward must still run (a custom Function's backward then gets None, or
# zeros where it materializes them). Zero grad_outputs for all of them must give zero or no
# gradients: torch's "backward not multiplied by grad_output", which runs for every check.
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
    gen_non_contig_grad_outputs: bool = False,
    raise_exception: bool = True,
    nondet_tol: float = 0.0,
    check_undefined_grad: bool = True,
    check_grad_dtypes: bool = False,
    check_batched_grad: bool = False,
    check_fwd_over_rev: bool = False,
    check_rev_over_rev: bool = True,
    fast_mode: bool = False,
    masked: bool = False,
) -> bool:
    """Check second derivatives: gradcheck of ``grad(func(inputs), inputs, v, create_graph=True)``
    with respect to both ``inputs`` and the vector ``v`` (random when not given; strided views
    with ``gen_non_contig_grad_outputs``). The other options as gradcheck's."""
    if check_fwd_over_rev:
        raise NotImplementedError(
            "gradgradcheck(check_fwd_over_rev=True): asyncgrad has no forward-mode AD yet"
        )
    if not check_rev_over_rev:
        raise ValueError("gradgradcheck: check_rev_over_rev=False leaves nothing to check")
    inputs = _as_tuple(inputs)
    with no_grad():
        outs0 = _diff_outputs(func, inputs)
    if grad_outputs is None:
        rng = backend.RandomState(0)

        def random_like(o: Tensor) -> Tensor:
            if not gen_non_contig_grad_outputs or o.ndim == 0:
                a = rng.normal(o.shape, o.dtype)
            else:  # every other element of a wider array: not contiguous
                a = rng.normal((*o.shape[:-1], 2 * o.shape[-1]), o.dtype)[..., ::2]
            return Tensor._wrap(backend.on_device(a, o.device)).requires_grad_()

        grad_outputs = tuple(random_like(o) for o in outs0)
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
        nondet_tol=nondet_tol,
        check_undefined_grad=check_undefined_grad,
        check_grad_dtypes=check_grad_dtypes,
        check_batched_grad=check_batched_grad,
        fast_mode=fast_mode,
        masked=masked,
    )
