"""A user's script and a user's async code, checked by mypy and pyright in CI (not a test module).

Both uses of a gradient function must type-check (See NOTE [One rule for gradient calls] in
asyncgrad/autograd/entry.py): torch's, where the call returns its result, and the awaited one.
"""

from __future__ import annotations

import asyncio
from typing import assert_type

import asyncgrad as ag
from asyncgrad.autograd import functional as F


def script() -> None:
    x = ag.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    (gx,) = ag.grad(y, x, retain_graph=True)
    assert_type(gx, ag.Tensor)
    gs = ag.autograd.grad(y, [x], retain_graph=True)
    assert_type(gs[0], ag.Tensor)
    maybe = ag.grad(y, [x], allow_unused=True, retain_graph=True)
    assert_type(maybe[0], ag.Tensor | None)
    tup: tuple[ag.Tensor, ...] = ag.grad(y, x, create_graph=True)
    ag.grad(tup, x, grad_outputs=ag.ones_like(x))
    ag.backward(y, retain_graph=True)
    ag.autograd.backward(y)
    y.backward()
    out, v = F.vjp(lambda t: (t * t).sum(), x.detach())
    jac = F.jacobian(lambda t: t * t, x.detach())
    # A script's calls ran at the call, and asyncio takes their values as finished coroutines.
    again = asyncio.run(ag.grad(y, x, retain_graph=True))
    assert_type(again, tuple[ag.Tensor, ...])
    asyncio.run(asyncio.wait_for(ag.backward(y, retain_graph=True), 5.0))
    print(gx, out, v, jac, again)


async def serve() -> None:
    x = ag.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    (gx,) = await ag.grad(y, x, retain_graph=True)
    assert_type(gx, ag.Tensor)
    maybe = await ag.grad(y, [x], allow_unused=True, retain_graph=True)
    assert_type(maybe, tuple[ag.Tensor | None, ...])
    await ag.backward(y, retain_graph=True)
    await ag.autograd.backward(y, retain_graph=True)
    task = asyncio.create_task(ag.grad(y, x, retain_graph=True))
    both = await asyncio.gather(ag.grad(y, x, retain_graph=True), task)
    assert_type(both, tuple[tuple[ag.Tensor, ...], tuple[ag.Tensor, ...]])
    await asyncio.wait_for(ag.backward(y), 5.0)
    out, v = await F.vjp(lambda t: (t * t).sum(), x.detach())
    jac = await F.jacobian(lambda t: t * t, x.detach())
    print(gx, out, v, jac)
