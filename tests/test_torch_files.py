"""``ag.save(obj, "x.pt")`` writes torch's zip format: ``torch.load(path, weights_only=True)``
reads it (every dtype, state dicts, optimizer state, nested containers, views sharing a
storage), and ``ag.load`` reads it and torch's own files back. Other suffixes keep asyncgrad's
format."""

from __future__ import annotations

import collections
import io
import pickletools
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag

torch = pytest.importorskip("torch", reason="compares with torch")

DTYPES = [
    ag.bool,
    ag.uint8,
    ag.int8,
    ag.int16,
    ag.int32,
    ag.int64,
    ag.uint16,
    ag.uint32,
    ag.uint64,
    ag.float16,
    ag.float32,
    ag.float64,
]
RNG = np.random.default_rng(3)


def _td(d: Any) -> Any:
    return getattr(torch, "bool" if d == ag.bool else str(d))


def _values(d: Any, shape: tuple[int, ...]) -> np.ndarray:
    if d == ag.bool:
        return RNG.random(shape) > 0.5
    if d.kind in "iu":
        info = np.iinfo(d)
        return RNG.integers(info.min, info.max, shape, dtype=d, endpoint=True)
    return RNG.standard_normal(shape).astype(d)


@pytest.mark.parametrize("d", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(2, 3), (), (0,), (5,)])
def test_every_dtype_goes_to_torch_and_back(tmp_path: Path, d: Any, shape: tuple[int, ...]) -> None:
    a = _values(d, shape)
    path = tmp_path / "t.pt"
    ag.save({"x": ag.tensor(a), "y": [ag.tensor(a)]}, path)
    got = torch.load(path, weights_only=True)
    assert got["x"].dtype == _td(d)
    assert tuple(got["x"].shape) == shape
    np.testing.assert_array_equal(got["x"].numpy(), a)
    np.testing.assert_array_equal(got["y"][0].numpy(), a)
    back = ag.load(path)
    assert back["x"].dtype == d
    np.testing.assert_array_equal(back["x"].numpy(), a)
    # and torch's own file of the same tensor (uint16/32/64 as _rebuild_tensor_v3)
    tpath = tmp_path / "torch.pt"
    torch.save({"x": torch.from_numpy(np.ascontiguousarray(a))}, tpath)
    from_torch = ag.load(tpath)
    assert from_torch["x"].dtype == d
    np.testing.assert_array_equal(from_torch["x"].numpy(), a)


@pytest.mark.parametrize("suffix", [".pt", ".pth", ".PT"])
def test_torch_suffixes_write_torchs_zip(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"m{suffix}"
    ag.save(ag.ones(2), str(path))
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
    assert "archive/data.pkl" in names
    assert "archive/byteorder" in names
    assert "archive/version" in names
    assert torch.equal(torch.load(path, weights_only=True), torch.ones(2))


@pytest.mark.parametrize("suffix", [".npz", ".ag", ".bin", ""])
def test_other_suffixes_and_file_objects_keep_asyncgrads_format(
    tmp_path: Path, suffix: str
) -> None:
    path = tmp_path / f"m{suffix}"
    ag.save({"w": ag.ones(2)}, path)
    with zipfile.ZipFile(path) as zf:
        assert "__asyncgrad__.npy" in zf.namelist()
    buf = io.BytesIO()
    ag.save({"w": ag.ones(2)}, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as zf:
        assert "__asyncgrad__.npy" in zf.namelist()


def _models() -> tuple[Any, Any]:
    ours = ag.nn.Sequential(
        ag.nn.Conv2d(2, 3, 3), ag.nn.ReLU(), ag.nn.Flatten(), ag.nn.Linear(12, 4)
    )
    theirs = torch.nn.Sequential(
        torch.nn.Conv2d(2, 3, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(12, 4)
    )
    return ours, theirs


def test_a_state_dict_loads_into_torchs_model_and_back(tmp_path: Path) -> None:
    ours, theirs = _models()
    ag.save(ours.state_dict(), tmp_path / "model.pt")
    sd = torch.load(tmp_path / "model.pt", weights_only=True)
    assert isinstance(sd, collections.OrderedDict)
    assert list(sd) == list(theirs.state_dict())
    theirs.load_state_dict(sd)
    x = RNG.standard_normal((2, 2, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(
        ours(ag.tensor(x)).detach().numpy(),
        theirs(torch.tensor(x)).detach().numpy(),
        rtol=1e-5,
        atol=1e-6,
    )
    # torch's file into asyncgrad's model
    other, _ = _models()
    torch.save(theirs.state_dict(), tmp_path / "torch.pt")
    other.load_state_dict(ag.load(tmp_path / "torch.pt"))
    for (k, a), (_, b) in zip(other.state_dict().items(), ours.state_dict().items(), strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=k)


def test_an_optimizer_state_dict_reads_in_torch(tmp_path: Path) -> None:
    lin = ag.nn.Linear(3, 2)
    opt = ag.optim.Adam(lin.parameters(), lr=0.1)
    lin(ag.ones(4, 3)).sum().backward()
    opt.step()
    sd = opt.state_dict()
    ag.save(sd, tmp_path / "opt.pth")
    got = torch.load(tmp_path / "opt.pth", weights_only=True)
    assert set(got["state"]) == {0, 1}
    assert got["param_groups"][0]["betas"] == (0.9, 0.999)
    assert got["param_groups"][0]["params"] == [0, 1]
    np.testing.assert_array_equal(
        got["state"][0]["exp_avg"].numpy(), sd["state"][0]["exp_avg"].numpy()
    )
    back = ag.load(tmp_path / "opt.pth")
    opt2 = ag.optim.Adam(ag.nn.Linear(3, 2).parameters(), lr=0.1)
    opt2.load_state_dict(back)
    assert opt2.state_dict()["state"][0]["step"] == sd["state"][0]["step"]


def test_views_share_one_storage_in_torch_and_in_ag_load(tmp_path: Path) -> None:
    base = ag.arange(12, dtype=ag.float64).reshape(3, 4)
    w = ag.nn.Parameter(ag.randn(3, 4))
    obj = {"base": base, "row": base[1], "col": base[:, 2], "w": w, "wt": w.t(), "again": w}
    ag.save(obj, tmp_path / "v.pt")
    got = torch.load(tmp_path / "v.pt", weights_only=True)
    assert got["again"] is got["w"]
    assert isinstance(got["w"], torch.nn.Parameter)
    assert got["w"].requires_grad
    assert got["wt"].stride() == (1, 4)
    np.testing.assert_array_equal(got["wt"].detach().numpy(), w.detach().numpy().T)
    got["base"][1, 2] = -1.0
    assert got["row"][2].item() == -1.0
    assert got["col"][1].item() == -1.0
    back = ag.load(tmp_path / "v.pt")
    assert back["again"] is back["w"]
    with ag.no_grad():
        back["base"][1, 2] = -1.0
    assert back["row"][2].item() == -1.0
    assert back["col"][1].item() == -1.0


def test_a_lone_strided_view_is_saved_by_value(tmp_path: Path) -> None:
    base = ag.arange(20.0).reshape(4, 5)
    ag.save({"v": base[::2, 1:4].t()}, tmp_path / "s.pt")
    got = torch.load(tmp_path / "s.pt", weights_only=True)
    np.testing.assert_array_equal(got["v"].numpy(), base.numpy()[::2, 1:4].T)


def test_plain_values_and_containers_round_trip(tmp_path: Path) -> None:
    obj = {
        "ints": [0, -1, 2**31, -(2**31) - 1, 2**70, -(2**70)],
        "floats": (1.5, -0.0, float("inf")),
        "s": "héllo",
        "nested": {"a": [{"b": (None, True, False)}], 3: "int key", 1.5: "float key"},
        "od": collections.OrderedDict([("z", 1), ("a", ag.ones(1))]),
        "dtypes": [ag.float16, ag.bool, ag.uint64],
        "device": ag.device("cpu"),
        "size": ag.Size([2, 3]),
        "empty": ([], (), {}),
        "np": np.int64(7),
    }
    ag.save(obj, tmp_path / "p.pt")
    got = torch.load(tmp_path / "p.pt", weights_only=True)
    assert got["ints"] == obj["ints"]
    assert got["floats"] == obj["floats"]
    assert got["s"] == obj["s"]
    assert got["nested"] == obj["nested"]
    assert isinstance(got["od"], collections.OrderedDict)
    assert list(got["od"]) == ["z", "a"]
    assert got["dtypes"] == [torch.float16, torch.bool, torch.uint64]
    assert got["device"] == torch.device("cpu")
    assert got["size"] == torch.Size([2, 3])
    assert isinstance(got["size"], torch.Size)
    assert got["empty"] == ([], (), {})
    assert got["np"] == 7
    back = ag.load(tmp_path / "p.pt")
    assert back["ints"] == obj["ints"]
    assert back["nested"] == obj["nested"]
    assert back["dtypes"] == obj["dtypes"]
    assert back["device"] == ag.device("cpu")
    assert back["size"] == ag.Size([2, 3])
    assert isinstance(back["size"], ag.Size)
    # torch's own file with the same plain values
    torch.save(
        {"d": torch.float64, "dev": torch.device("cpu"), "size": torch.Size([1])}, tmp_path / "t.pt"
    )
    tb = ag.load(tmp_path / "t.pt")
    assert tb == {"d": ag.float64, "dev": ag.device("cpu"), "size": ag.Size([1])}


def test_the_pickle_names_only_what_torchs_weights_only_loader_allows(tmp_path: Path) -> None:
    obj = {"p": ag.nn.Parameter(ag.ones(2)), "u": ag.zeros(1, dtype=ag.uint32), "d": ag.int8}
    ag.save(obj, tmp_path / "g.pt")
    with zipfile.ZipFile(tmp_path / "g.pt") as zf:
        pickled = zf.read("archive/data.pkl")
    names = {arg for op, arg, _ in pickletools.genops(pickled) if op.name == "GLOBAL"}
    assert names == {
        "torch._utils _rebuild_parameter",
        "torch._utils _rebuild_tensor_v2",
        "torch._utils _rebuild_tensor_v3",
        "torch FloatStorage",
        "torch.storage UntypedStorage",
        "collections OrderedDict",
        "torch uint32",
        "torch int8",
    }


def test_what_cannot_be_saved_raises(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"cannot save obj\[.f.\] of type builtins"):
        ag.save({"f": len}, tmp_path / "bad.pt")
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="contains itself"):
        ag.save(loop, tmp_path / "loop.pt")
    with pytest.raises(TypeError, match="cannot save a dict key of type Tensor"):
        ag.save({ag.ones(1): 1}, tmp_path / "key.pt")
    assert not (tmp_path / "bad.pt").exists()


def test_cuda_tensors_keep_their_device(tmp_path: Path) -> None:
    if not ag.cuda.is_available():
        pytest.skip("needs a (simulated) CUDA device")
    t = ag.arange(4.0, device="cuda:1")
    ag.save({"t": t, "v": t[1:]}, tmp_path / "c.pt")
    got = torch.load(tmp_path / "c.pt", weights_only=True, map_location="cpu")
    np.testing.assert_array_equal(got["t"].numpy(), [0.0, 1.0, 2.0, 3.0])
    with zipfile.ZipFile(tmp_path / "c.pt") as zf:
        assert b"cuda:1" in zf.read("archive/data.pkl")
    back = ag.load(tmp_path / "c.pt")
    assert back["t"].device == ag.device("cuda:1")
    np.testing.assert_array_equal(back["v"].cpu().numpy(), [1.0, 2.0, 3.0])


def test_storages_are_aligned_as_torchs_so_mmap_loads(tmp_path: Path) -> None:
    obj = {"a": ag.arange(5.0), "b": ag.ones(3, dtype=ag.float64), "c": ag.zeros(7, dtype=ag.int8)}
    ag.save(obj, tmp_path / "m.pt")
    with zipfile.ZipFile(tmp_path / "m.pt") as zf:
        for info in zf.infolist():
            if "/data/" in info.filename:
                start = info.header_offset + 30 + len(info.filename) + len(info.extra)
                assert start % 64 == 0, info.filename
    got = torch.load(tmp_path / "m.pt", mmap=True, weights_only=True)
    for k, v in obj.items():
        np.testing.assert_array_equal(got[k].numpy(), v.numpy())
