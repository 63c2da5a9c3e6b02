"""ag.utils.data: datasets, batching, shuffling with a generator, and default_collate."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.utils.data import DataLoader, Dataset, Subset, TensorDataset, default_collate


@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch", reason="torch is the reference for default_collate")


class Squares(Dataset[dict[str, Any]]):
    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"x": float(i), "y": i * i, "v": np.full(2, i, dtype=np.float32), "name": str(i)}


def test_tensor_dataset_and_batches() -> None:
    x, y = ag.arange(10).reshape(5, 2), ag.tensor([0, 1, 0, 1, 1])
    ds = TensorDataset(x, y)
    assert len(ds) == 5
    assert ag.equal(ds[1][0], ag.tensor([2, 3]))
    loader = DataLoader(ds, batch_size=2)
    assert len(loader) == 3
    batches = list(loader)
    assert [tuple(b[0].shape) for b in batches] == [(2, 2), (2, 2), (1, 2)]
    assert ag.equal(batches[2][1], ag.tensor([1]))
    assert len(DataLoader(ds, batch_size=2, drop_last=True)) == 2
    assert len(list(DataLoader(ds, batch_size=2, drop_last=True))) == 2
    with pytest.raises(ValueError, match="Size mismatch between tensors"):
        TensorDataset(ag.zeros(3), ag.zeros(4))


def test_shuffle_is_a_permutation_reproducible_with_a_generator() -> None:
    ds = TensorDataset(ag.arange(50))

    def epoch(loader: DataLoader[Any]) -> list[int]:
        return [int(v) for b in loader for v in b[0].tolist()]

    first = epoch(
        DataLoader(ds, batch_size=8, shuffle=True, generator=ag.Generator().manual_seed(1))
    )
    again = epoch(
        DataLoader(ds, batch_size=8, shuffle=True, generator=ag.Generator().manual_seed(1))
    )
    assert first == again
    assert sorted(first) == list(range(50))
    assert first != list(range(50))
    g = ag.Generator().manual_seed(1)
    loader = DataLoader(ds, batch_size=8, shuffle=True, generator=g)
    assert epoch(loader) == first
    assert epoch(loader) != first  # a fresh order each epoch
    ag.manual_seed(4)
    a = epoch(DataLoader(ds, batch_size=50, shuffle=True))
    ag.manual_seed(4)
    assert epoch(DataLoader(ds, batch_size=50, shuffle=True)) == a
    assert epoch(DataLoader(ds, batch_size=7)) == list(range(50))


def test_collate_of_dicts_numbers_arrays_and_strings(torch: Any) -> None:
    loader = DataLoader(Squares(), batch_size=4)
    batch = next(iter(loader))
    assert batch["x"].dtype == ag.float64
    assert batch["y"].dtype == ag.int64
    assert batch["v"].dtype == ag.float32
    assert batch["v"].shape == (4, 2)
    assert batch["name"] == ["0", "1", "2", "3"]
    ref = torch.utils.data.default_collate([Squares()[i] for i in range(4)])
    for key in ("x", "y", "v"):
        np.testing.assert_array_equal(batch[key].numpy(), ref[key].numpy())
        assert str(batch[key].dtype) == str(ref[key].dtype).removeprefix("torch.")


def test_collate_of_sequences_and_named_tuples(torch: Any) -> None:
    samples = [(ag.ones(2) * i, [i, float(i)], True) for i in range(3)]
    out = default_collate(samples)
    ref = torch.utils.data.default_collate(
        [(torch.ones(2) * i, [i, float(i)], True) for i in range(3)]
    )
    assert isinstance(out, list)
    assert isinstance(ref, list)
    assert out[0].shape == (3, 2)
    assert out[1][0].tolist() == ref[1][0].tolist() == [0, 1, 2]
    assert out[2].dtype == ag.bool
    Point = namedtuple("Point", "x y")
    pts = default_collate([Point(1, 2.0), Point(3, 4.0)])
    assert isinstance(pts, Point)
    assert pts.x.tolist() == [1, 3]
    assert default_collate([np.float32(1.5), np.float32(2.0)]).dtype == ag.float32
    with pytest.raises(RuntimeError, match="each element in list of batch should be of equal size"):
        default_collate([[1, 2], [3]])
    with pytest.raises(TypeError, match="default_collate: batch must contain tensors"):
        default_collate([object()])


def test_custom_collate_no_batching_and_subset() -> None:
    ds = TensorDataset(ag.arange(6))
    loader = DataLoader(ds, batch_size=4, collate_fn=lambda b: len(b))
    assert list(loader) == [4, 2]
    unbatched = DataLoader(ds, batch_size=None)
    assert len(unbatched) == 6
    assert int(next(iter(unbatched))[0].item()) == 0
    sub = Subset(ds, [5, 0])
    assert len(sub) == 2
    assert int(sub[0][0].item()) == 5


def test_loader_errors() -> None:
    ds = TensorDataset(ag.arange(6))
    with pytest.raises(ValueError, match="use num_workers=0"):
        DataLoader(ds, num_workers=2)
    with pytest.raises(ValueError, match="batch_size should be a positive integer value"):
        DataLoader(ds, batch_size=0)
    with pytest.raises(ValueError, match="mutually exclusive with drop_last"):
        DataLoader(ds, batch_size=None, drop_last=True)
    with pytest.raises(NotImplementedError, match="should implement __getitem__"):
        Dataset()[0]


def test_training_loop_with_a_loader() -> None:
    g = ag.Generator().manual_seed(0)
    x = ag.randn(64, 3, generator=g)
    y = (x.sum(1) > 0).long()
    model = ag.nn.Sequential(ag.nn.Linear(3, 8), ag.nn.ReLU(), ag.nn.Linear(8, 2))
    opt = ag.optim.SGD(model.parameters(), lr=0.5)
    loss_fn = ag.nn.CrossEntropyLoss()
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True, generator=g)
    losses = []
    for _ in range(15):
        for xb, yb in loader:
            loss = loss_fn(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    assert losses[-1] < losses[0]
