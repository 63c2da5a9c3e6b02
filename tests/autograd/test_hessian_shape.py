"""``hessian`` of a function whose one-element output has extra dimensions has the Hessian's
own shape, as torch's (which squeezes the output)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import asyncgrad as ag

torch = pytest.importorskip("torch", reason="torch is the reference of this test")


@pytest.mark.parametrize("shape", [(), (1,), (1, 1, 1)])
@pytest.mark.parametrize("pair", [False, True], ids=["one input", "two inputs"])
def test_hessian_shape_as_torch(shape: tuple[int, ...], pair: bool) -> None:
    xv, yv = np.array([0.5, -1.0, 2.0]), np.array([1.5, 0.25])

    def f(lib: Any) -> Any:
        if pair:
            return lambda x, y: ((x**3).sum() * y.sin().sum()).reshape(shape)
        return lambda x: (x**3 * x.sin()).sum().reshape(shape)

    args_ag = (ag.tensor(xv), ag.tensor(yv)) if pair else ag.tensor(xv)
    args_t = (torch.tensor(xv), torch.tensor(yv)) if pair else torch.tensor(xv)
    ours = ag.autograd.functional.hessian(f(ag), args_ag)
    theirs = torch.autograd.functional.hessian(f(torch), args_t)
    if not pair:
        ours, theirs = ((ours,),), ((theirs,),)
    for row_a, row_t in zip(ours, theirs, strict=True):
        for a, t in zip(row_a, row_t, strict=True):
            assert tuple(a.shape) == tuple(t.shape)
            np.testing.assert_allclose(a.numpy(), t.numpy(), rtol=1e-12)
