"""Keep the tensors saved for backward as compressed bytes, with saved-tensor hooks.

Every tensor an op saves for backward inside ``ag.autograd.graph.saved_tensors_hooks(pack,
unpack)`` goes through ``pack`` when it is saved; the graph keeps only what ``pack`` returns, and
backward reads ``unpack(that)`` instead. Here ``pack`` compresses the array's bytes with zlib and
``unpack`` rebuilds the array, so between forward and backward the activations of a ReLU MLP
(half zeros) take a fraction of their size; parameters, which stay alive anyway, are kept as
they are. The gradients are bit for bit those of the plain
run, and the script prints the bytes saved either way.

    python examples/saved_tensors_offload.py [--layers 6] [--width 512] [--batch 256]
"""

from __future__ import annotations

import argparse
import tracemalloc
import weakref
import zlib
from typing import Any

import numpy as np

import asyncgrad as ag


class Packed:
    """One array as compressed bytes."""

    def __init__(self, data: bytes, shape: tuple[int, ...], dtype: str, device: Any) -> None:
        self.data, self.shape, self.dtype, self.device = data, shape, dtype, device


class ZlibStore:
    """The pack and unpack hooks, counting the bytes they see.

    An array saved twice (a ReLU's output is saved by the ReLU and by the next Linear) is
    compressed once: ``seen`` maps a live array's id to its Packed while that array exists.
    """

    def __init__(self) -> None:
        self.raw = 0
        self.stored = 0
        self.tensors = 0
        self.seen: dict[int, weakref.ref[Packed]] = {}

    def pack(self, t: ag.Tensor) -> Any:
        if t.is_leaf and t.requires_grad:
            return t  # a parameter: it stays alive anyway, keep it as it is
        arr = t.detach().cpu().numpy()
        key = id(t.array)
        ref = self.seen.get(key)
        p = None if ref is None else ref()
        if p is not None:
            return p
        data = zlib.compress(np.ascontiguousarray(arr).tobytes(), level=1)
        self.tensors += 1
        self.raw += arr.nbytes
        self.stored += len(data)
        p = Packed(data, arr.shape, arr.dtype.str, t.device)
        self.seen[key] = weakref.ref(p)
        weakref.finalize(t.array, self.seen.pop, key, None)
        return p

    @staticmethod
    def unpack(packed: Any) -> ag.Tensor:
        if isinstance(packed, ag.Tensor):
            return packed
        arr = np.frombuffer(zlib.decompress(packed.data), dtype=packed.dtype)
        return ag.tensor(arr.reshape(packed.shape).copy()).to(packed.device)


def build(layers: int, width: int) -> ag.nn.Sequential:
    ag.manual_seed(0)
    mods: list[ag.nn.Module] = []
    for _ in range(layers):
        mods += [ag.nn.Linear(width, width), ag.nn.ReLU()]
    return ag.nn.Sequential(*mods)


def gradients(
    model: ag.nn.Sequential, x: ag.Tensor, store: ZlibStore | None
) -> tuple[list[Any], int]:
    """The parameters' gradients, and the bytes the forward left allocated for backward
    (measured with tracemalloc, to which NumPy reports its arrays)."""
    model.zero_grad()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    if store is None:
        loss = model(x).pow(2).mean()
    else:
        with ag.autograd.graph.saved_tensors_hooks(store.pack, store.unpack):
            loss = model(x).pow(2).mean()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    loss.backward()
    return [p.grad.numpy().copy() for p in model.parameters()], held


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--batch", type=int, default=256)
    a = ap.parse_args(argv)
    model = build(a.layers, a.width)
    x = ag.tensor(np.random.default_rng(0).standard_normal((a.batch, a.width), dtype=np.float32))
    plain, held_plain = gradients(model, x, None)
    store = ZlibStore()
    packed, held_packed = gradients(model, x, store)
    same = all(np.array_equal(p, q) for p, q in zip(plain, packed, strict=True))
    print(f"MLP of {a.layers} Linear+ReLU layers of {a.width}, batch {a.batch}, float32")
    print(f"activations saved for backward: {store.tensors}")
    print(f"  as arrays:        {store.raw / 2**20:8.2f} MB")
    print(f"  zlib-compressed:  {store.stored / 2**20:8.2f} MB ({store.stored / store.raw:.0%})")
    print(f"  memory saved:     {(store.raw - store.stored) / 2**20:8.2f} MB")
    print("memory the forward leaves for backward (tracemalloc):")
    print(f"  plain:            {held_plain / 2**20:8.2f} MB")
    print(f"  with the hooks:   {held_packed / 2**20:8.2f} MB")
    print(f"gradients identical to the plain run's: {same}")
    return {
        "raw": store.raw,
        "stored": store.stored,
        "same": same,
        "tensors": store.tensors,
        "held_plain": held_plain,
        "held_packed": held_packed,
    }


if __name__ == "__main__":
    main()
