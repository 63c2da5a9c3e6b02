"""ag.save / ag.load: exact round trips, state dicts across devices, and files that are not ours."""

from __future__ import annotations

import io
import json
import math
import os
import pickle
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import nn

from .cuda.conftest import assert_close

SAFETENSORS_REASON = "needs the safetensors package (pip install '.[safetensors]')"


def _needs_cuda() -> None:
    if not ag.cuda.is_available():
        pytest.skip("no CUDA device (real, or simulated with ASYNCGRAD_SIM_CUDA=N)")


def _same(a: ag.Tensor, b: ag.Tensor) -> None:
    """Equal bit for bit: dtype, shape, device, requires_grad and every byte of data."""
    assert type(a) is type(b)
    assert a.dtype == b.dtype
    assert a.shape == b.shape
    assert a.device == b.device
    assert a.requires_grad == b.requires_grad
    ha, hb = a.detach().cpu().numpy(), b.detach().cpu().numpy()
    assert ha.shape == hb.shape
    assert np.ascontiguousarray(ha).tobytes() == np.ascontiguousarray(hb).tobytes()


def _round_trip(obj: Any, path: Path | None = None, **load_kwargs: Any) -> Any:
    if path is None:
        buf = io.BytesIO()
        ag.save(obj, buf)
        return ag.load(io.BytesIO(buf.getvalue()), **load_kwargs)
    ag.save(obj, path)
    return ag.load(path, **load_kwargs)


TENSORS = {
    "float32": lambda: ag.randn(3, 4),
    "float64": lambda: ag.randn(2, 3, dtype=ag.float64),
    "float16": lambda: ag.randn(5, dtype=ag.float16),
    "int64": lambda: ag.arange(-5, 7).reshape(3, 4),
    "int32": lambda: ag.tensor([2**31 - 1, -(2**31)], dtype=ag.int32),
    "uint8": lambda: ag.from_numpy(np.arange(250, 256, dtype=np.uint8)),
    "bool": lambda: ag.tensor([[True, False], [False, True]]),
    "0d": lambda: ag.tensor(3.5),
    "0d_int": lambda: ag.tensor(-7),
    "empty": lambda: ag.zeros(0),
    "empty_2d": lambda: ag.zeros(3, 0, 2, dtype=ag.int64),
    "view": lambda: ag.arange(24.0).reshape(4, 6)[1:, ::2].t(),
    "special": lambda: ag.tensor([math.nan, math.inf, -math.inf, -0.0, 1e-45, 3.4e38]),
    "requires_grad": lambda: ag.randn(2, 2, requires_grad=True),
    "parameter": lambda: nn.Parameter(ag.randn(3)),
}


@pytest.mark.parametrize("name", TENSORS)
def test_tensors_round_trip_exactly(name: str, tmp_path: Path) -> None:
    x = TENSORS[name]()
    _same(x, _round_trip(x))
    _same(x, _round_trip(x, tmp_path / "x.pt"))


def test_a_non_leaf_saves_as_a_leaf_that_requires_grad() -> None:
    x = ag.ones(2, requires_grad=True) * 3
    y = _round_trip(x)
    assert y.is_leaf
    assert y.requires_grad
    assert y.tolist() == [3.0, 3.0]


def test_nested_structures_with_plain_values_round_trip() -> None:
    t = ag.ones(2)
    obj = {
        "tensor": t,
        "again": [t, (t,)],
        "plain": [None, True, False, 0, -(2**70), 1.5, -0.0, "text ✓", ""],
        "special": [math.inf, -math.inf],
        "tuple": (1, (2.0, "three"), []),
        "int_keys": {0: "a", 1: {"nested": (None,)}, -3: 4},
        "other_keys": {1.5: 1, None: 2, True: 3, (1, "x"): 4},
        "ordered": OrderedDict([("b", 1), ("a", 2)]),
        "dtype": ag.float64,
        "device": ag.device("cpu"),
        "numpy_scalars": [np.float32(0.25), np.int64(3), np.bool_(True)],
    }
    back = _round_trip(obj)
    assert back["plain"] == obj["plain"]
    assert [type(v) for v in back["plain"]] == [type(v) for v in obj["plain"]]
    assert back["special"] == obj["special"]
    assert back["tuple"] == obj["tuple"]
    assert type(back["tuple"][1]) is tuple
    assert back["int_keys"] == obj["int_keys"]
    assert back["other_keys"] == obj["other_keys"]
    assert type(back["ordered"]) is OrderedDict
    assert list(back["ordered"]) == ["b", "a"]
    assert back["dtype"] == ag.float64
    assert back["device"] is ag.device("cpu")
    assert back["numpy_scalars"] == [0.25, 3, True]
    assert list(back) == list(obj)
    # One tensor saved under several names loads as one tensor.
    assert back["again"][0] is back["tensor"]
    assert back["again"][1][0] is back["tensor"]
    nan = _round_trip([math.nan])[0]
    assert math.isnan(nan)


def test_a_model_and_its_optimizer_resume_exactly(tmp_path: Path) -> None:
    def make() -> tuple[nn.Module, ag.optim.Optimizer]:
        model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
        return model, ag.optim.Adam(model.parameters(), lr=0.01, betas=(0.8, 0.9))

    def step(model: nn.Module, opt: ag.optim.Optimizer, x: ag.Tensor) -> None:
        opt.zero_grad()
        (model(x) ** 2).sum().backward()
        opt.step()

    ag.manual_seed(0)
    model, opt = make()
    xs = [ag.randn(5, 3) for _ in range(3)]
    step(model, opt, xs[0])
    ag.save({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": 1}, tmp_path / "ck")
    assert os.listdir(tmp_path) == ["ck"]  # the path as given: no ".npz" added, no temp left
    step(model, opt, xs[1])

    model2, opt2 = make()
    ck = ag.load(tmp_path / "ck")
    assert ck["epoch"] == 1
    assert ck["opt"]["param_groups"][0]["betas"] == (0.8, 0.9)
    model2.load_state_dict(ck["model"])
    opt2.load_state_dict(ck["opt"])
    step(model2, opt2, xs[1])
    for a, b in zip(model.parameters(), model2.parameters(), strict=True):
        assert a.tolist() == b.tolist()


def test_unsupported_values_raise_and_write_nothing(tmp_path: Path) -> None:
    path = tmp_path / "x.pt"
    with pytest.raises(TypeError, match=r"cannot save obj\['a'\]\[1\] of type builtins.set"):
        ag.save({"a": [ag.ones(1), {1, 2}]}, path)
    with pytest.raises(TypeError, match=r"numpy\.ndarray"):
        ag.save([np.ones(2)], path)
    with pytest.raises(TypeError, match="dict key of type Tensor"):
        ag.save({ag.ones(1): 1}, path)
    cyclic: list[Any] = [1]
    cyclic.append(cyclic)
    with pytest.raises(ValueError, match=r"obj\[1\] contains itself"):
        ag.save(cyclic, path)
    assert os.listdir(tmp_path) == []
    # A failed save leaves an earlier file as it was.
    ag.save({"a": 1}, path)
    with pytest.raises(TypeError):
        ag.save({"a": object()}, path)
    assert ag.load(path) == {"a": 1}


def test_the_file_is_an_npz_without_pickles(tmp_path: Path) -> None:
    path = tmp_path / "x.npz"
    ag.save({"w": ag.ones(2, 3), "n": 4}, path)
    with np.load(path, allow_pickle=False) as npz:
        assert sorted(npz.files) == ["__asyncgrad__", "t0"]
        assert npz["t0"].shape == (2, 3)
    assert zipfile.is_zipfile(path)


def test_a_plain_npz_loads_as_a_dict_of_tensors(tmp_path: Path) -> None:
    path = tmp_path / "plain.npz"
    np.savez(path, a=np.arange(3), b=np.ones((2, 2), dtype=np.float16))
    out = ag.load(path)
    assert list(out) == ["a", "b"]
    assert out["a"].tolist() == [0, 1, 2]
    assert out["b"].dtype == ag.float16


# ============================================================================= views


def _entries(path: Path) -> dict[str, tuple[int, ...]]:
    with np.load(path, allow_pickle=False) as npz:
        return {k: npz[k].shape for k in npz.files if k != "__asyncgrad__"}


def _version(path: Path) -> Any:
    with np.load(path, allow_pickle=False) as npz:
        return json.loads(npz["__asyncgrad__"].tobytes())["version"]


def test_views_saved_with_their_base_share_its_memory_after_loading(tmp_path: Path) -> None:
    w = ag.arange(12.0).reshape(3, 4)
    saved = {
        "w": w,
        "row": w[1],
        "col": w[:, 2],
        "t": w.t(),
        "flat": w.view(-1)[::5],
        "expanded": w[0:1].expand(5, 4),
        "detached": w.detach(),
        "alone": ag.ones(3),
    }
    path = tmp_path / "views.pt"
    ag.save(saved, path)
    # One storage of w's 12 elements holds w and its views; the unrelated tensor is its own.
    assert sorted(_entries(path).values()) == [(3,), (12,)]
    assert _version(path) == 2
    got = ag.load(path)
    for k, v in saved.items():
        _same(got[k], v)
    with ag.no_grad():
        got["w"].mul_(-1.0)
    assert got["row"].tolist() == [-4.0, -5.0, -6.0, -7.0]
    assert got["col"].tolist() == [-2.0, -6.0, -10.0]
    assert got["t"][3].tolist() == [-3.0, -7.0, -11.0]
    assert got["flat"].tolist() == [0.0, -5.0, -10.0]
    assert got["expanded"][4].tolist() == [0.0, -1.0, -2.0, -3.0]
    assert got["detached"].tolist() == got["w"].tolist()
    assert got["alone"].tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        got["expanded"].add_(1.0)  # an expanded view stays one you cannot write, as in torch
    assert got["w"][0].tolist() == [-0.0, -1.0, -2.0, -3.0]

    again = tmp_path / "again.pt"  # loaded views saved again still share
    ag.save(got, again)
    assert sorted(_entries(again).values()) == [(3,), (12,)]
    back = ag.load(again)
    with ag.no_grad():
        back["t"].zero_()
    assert back["w"].abs().sum().item() == 0.0


def test_overlapping_views_without_their_base_share_only_what_they_cover(
    tmp_path: Path,
) -> None:
    w = ag.arange(20.0).reshape(5, 4)
    path = tmp_path / "part.pt"
    ag.save({"a": w[0:2], "b": w[1:3], "c": w[4]}, path)
    # a and b overlap on row 1: one storage of rows 0-2; c shares no element with them.
    assert sorted(_entries(path).values()) == [(4,), (12,)]
    got = ag.load(path)
    assert got["a"].tolist() == w[0:2].tolist()
    assert got["b"].tolist() == w[1:3].tolist()
    assert got["c"].tolist() == w[4].tolist()
    got["a"][1, 0] = 100.0
    assert got["b"][0, 0].item() == 100.0


def test_arrays_with_negative_strides_share_memory_after_loading(tmp_path: Path) -> None:
    host = np.arange(10.0)
    path = tmp_path / "reversed.pt"
    ag.save({"rev": ag.from_numpy(host[::-1]), "mid": ag.from_numpy(host[2:5])}, path)
    assert sorted(_entries(path).values()) == [(10,)]
    got = ag.load(path)
    assert got["rev"].tolist() == host[::-1].tolist()
    got["mid"][0] = -5.0
    assert got["rev"][7].item() == -5.0


def test_a_file_without_views_keeps_the_first_format_version(tmp_path: Path) -> None:
    path = tmp_path / "plain.pt"
    w = ag.ones(2, 2)
    ag.save({"w": w, "same": w, "b": ag.zeros(3), "empty": w[:0]}, path)
    assert _version(path) == 1  # readable by every asyncgrad that reads files
    got = ag.load(path)
    assert got["w"] is got["same"]
    assert got["empty"].shape == (0, 2)


def test_parameters_and_views_of_them_round_trip(tmp_path: Path) -> None:
    p = nn.Parameter(ag.randn(4, 3))
    path = tmp_path / "tied.pt"
    ag.save({"weight": p, "weight_t": p.detach().t()}, path)
    got = ag.load(path)
    assert isinstance(got["weight"], nn.Parameter)
    assert got["weight"].requires_grad
    assert not isinstance(got["weight_t"], nn.Parameter)
    _same(got["weight"], p)
    with ag.no_grad():
        got["weight"].add_(1.0)
    np.testing.assert_array_equal(got["weight_t"].numpy(), got["weight"].detach().numpy().T)


@pytest.mark.cuda
def test_views_share_memory_after_loading_on_a_cuda_device(tmp_path: Path) -> None:
    _needs_cuda()
    w = ag.arange(12.0, device="cuda").reshape(3, 4)
    path = tmp_path / "gpu_views.pt"
    ag.save({"w": w, "row": w[2], "t": w.t()}, path)
    assert sorted(_entries(path).values()) == [(12,)]
    for where in (None, "cpu"):
        got = ag.load(path, map_location=where)
        assert got["row"].device == ag.device(where or "cuda:0")
        with ag.no_grad():
            got["w"].add_(1.0)
        assert got["row"].tolist() == [9.0, 10.0, 11.0, 12.0]
        assert got["t"][0].tolist() == [1.0, 5.0, 9.0]
    cpu = tmp_path / "cpu_views.pt"
    host = w.cpu()
    ag.save({"w": host, "col": host[:, 1]}, cpu)
    got = ag.load(cpu, map_location="cuda")
    got["w"][0, 1] = -1.0
    assert got["col"].device == ag.device("cuda:0")
    assert got["col"].tolist() == [-1.0, 5.0, 9.0]


@pytest.mark.parametrize(
    ("views", "why"),
    [
        (b"[1]", "views are not a table"),
        (b'{"t0": {"storage": "s9", "offset": 0, "size": [2], "stride": [1]}}', "no 1-d storage"),
        (
            b'{"t0": {"storage": "s0", "offset": 2, "size": [2], "stride": [1]}}',
            r"needs elements 2\.\.3 of a storage of 3",
        ),
        (
            b'{"t0": {"storage": "s0", "offset": 0, "size": [2], "stride": [-1]}}',
            r"needs elements -1\.\.0 of a storage of 3",
        ),
        (b'{"t0": {"storage": "s0", "offset": -1, "size": [1], "stride": [1]}}', "malformed"),
        (b'{"t0": {"storage": "s0", "offset": 0, "size": 2, "stride": 1}}', "malformed"),
        (b'{"t0": {"storage": "s0", "offset": 0, "size": [2], "stride": [1, 1]}}', "malformed"),
    ],
)
def test_malformed_views_raise_naming_the_file(views: bytes, why: str, tmp_path: Path) -> None:
    path = tmp_path / "bad_views.npz"
    structure = (
        b'{"format": "asyncgrad", "version": 2, "root": {"type": "tensor", "data": "t0"}, '
        b'"views": ' + views + b"}"
    )
    _npz_with_structure(path, structure, s0=np.arange(3.0))
    with pytest.raises(RuntimeError, match=rf"bad_views\.npz' is not a valid .*file: .*{why}"):
        ag.load(path)


# ============================================================================= bad files


def _good_file(tmp_path: Path) -> bytes:
    ag.save({"w": ag.randn(20, 20), "step": 3, "name": "x" * 50}, tmp_path / "good")
    return (tmp_path / "good").read_bytes()


def test_truncated_files_raise_naming_the_file(tmp_path: Path) -> None:
    data = _good_file(tmp_path)
    path = tmp_path / "cut.pt"
    for n in (0, 1, 10, 100, len(data) // 2, len(data) - 30, len(data) - 1):
        path.write_bytes(data[:n])
        with pytest.raises(RuntimeError, match=rf"ag.load: '{path}' is not a valid asyncgrad file"):
            ag.load(path)


def test_random_bytes_raise(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    path = tmp_path / "noise"
    for n in (1, 9, 64, 4096):
        path.write_bytes(rng.bytes(n))
        with pytest.raises(RuntimeError, match="is not a valid asyncgrad file"):
            ag.load(path)
    with pytest.raises(RuntimeError, match=r"<BytesIO> is not a valid asyncgrad file"):
        ag.load(io.BytesIO(b"PK\x03\x04 not really a zip"))


def test_corrupted_bytes_inside_a_file_raise(tmp_path: Path) -> None:
    data = bytearray(_good_file(tmp_path))
    path = tmp_path / "flipped"
    rng = np.random.default_rng(1)
    errors = []
    for _ in range(20):
        bad = bytearray(data)
        for i in rng.integers(0, len(bad), 8):
            bad[i] ^= 0xFF
        path.write_bytes(bytes(bad))
        try:
            ag.load(path)  # a flip inside the tensor's data still loads: the file is well formed
        except RuntimeError as e:
            errors.append(str(e))
    assert errors
    assert all("is not a valid asyncgrad file" in e for e in errors)


class _Payload:
    """Pickling this runs ``os.system`` on load: what a malicious checkpoint does."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def test_pickled_objects_are_never_loaded(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.npz"
    with open(path, "wb") as f:
        np.savez(f, a=np.array([_Payload(marker)], dtype=object))
    with pytest.raises(RuntimeError, match=r"object array .* never loaded"):
        ag.load(path)
    path.write_bytes(pickle.dumps({"w": _Payload(marker)}))
    with pytest.raises(RuntimeError, match="is not a valid asyncgrad file"):
        ag.load(path)
    np.save(path, np.array([_Payload(marker)], dtype=object), allow_pickle=True)
    with pytest.raises(RuntimeError, match="is not a valid asyncgrad file"):
        ag.load(path)
    assert not marker.exists()


def _npz_with_structure(path: Path, structure: bytes, **arrays: Any) -> None:
    with open(path, "wb") as f:
        np.savez(f, __asyncgrad__=np.frombuffer(structure, dtype=np.uint8), **arrays)


@pytest.mark.parametrize(
    ("structure", "why"),
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[1, 2]", "not an asyncgrad structure"),
        (b'{"format": "asyncgrad", "version": 99, "root": 1}', "format version 99"),
        (
            b'{"format": "asyncgrad", "version": 1, "root": {"type": "tensor", "data": "t9"}}',
            "missing array 't9'",
        ),
        (
            b'{"format": "asyncgrad", "version": 1, "root": {"type": "code", "src": "x"}}',
            "unknown node type 'code'",
        ),
        (
            b'{"format": "asyncgrad", "version": 1, "root": {"type": "dict", "items": [[[1], 2]]}}',
            "not hashable",
        ),
        (
            b'{"format": "asyncgrad", "version": 1, "root": {"type": "dtype", "name": "object"}}',
            "unknown dtype",
        ),
        (
            b'{"format": "asyncgrad", "version": 1, "root": '
            b'{"type": "tensor", "data": "t0", "device": "tpu"}}',
            "invalid device",
        ),
        (
            b'{"format": "asyncgrad", "version": 1, "root": '
            b'{"type": "tensor", "data": "t0", "requires_grad": true}}',
            "dtype int64 requires",
        ),
        (
            b'{"format": "asyncgrad", "version": 1, "root": '
            + b"[" * 100000
            + b"]" * 100000
            + b"}",
            "nested too deeply|not valid JSON",
        ),
    ],
)
def test_malformed_structures_raise(structure: bytes, why: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.npz"
    _npz_with_structure(path, structure, t0=np.arange(3))
    with pytest.raises(
        RuntimeError, match=rf"{path.name}' is not a valid asyncgrad file: .*({why})"
    ):
        ag.load(path)


# ============================================================================= devices


@pytest.mark.cuda
def test_a_state_dict_from_cuda_loads_on_the_cpu_and_back(tmp_path: Path) -> None:
    _needs_cuda()
    ag.manual_seed(0)
    gpu = nn.Linear(3, 2).to("cuda")
    ag.save(gpu.state_dict(), tmp_path / "gpu.pt")
    kept = ag.load(tmp_path / "gpu.pt")
    assert kept["weight"].device == ag.device("cuda:0")
    cpu = nn.Linear(3, 2)
    cpu.load_state_dict(ag.load(tmp_path / "gpu.pt", map_location="cpu"))
    for name, value in gpu.state_dict().items():  # the weights arrive bit for bit
        assert np.array_equal(cpu.state_dict()[name].numpy(), value.cpu().numpy()), name
    x = ag.randn(4, 3)
    # The products are the device's (cuBLAS rounds otherwise than the CPU's BLAS).
    assert_close(gpu(x.cuda()).detach().cpu().numpy(), cpu(x).detach().numpy(), rtol=1e-6)

    ag.save(cpu.state_dict(), tmp_path / "cpu.pt")
    gpu2 = nn.Linear(3, 2).to("cuda")
    sd = ag.load(tmp_path / "cpu.pt", map_location=ag.device("cuda"))
    assert all(v.device == ag.device("cuda:0") for v in sd.values())
    gpu2.load_state_dict(sd)
    for name, value in gpu2.state_dict().items():
        assert np.array_equal(value.cpu().numpy(), cpu.state_dict()[name].numpy()), name
    assert_close(gpu2(x.cuda()).cpu().detach().numpy(), cpu(x).detach().numpy(), rtol=1e-6)

    by_dict = ag.load(tmp_path / "gpu.pt", map_location={"cuda:0": "cpu"})
    by_fn = ag.load(tmp_path / "gpu.pt", map_location=lambda saved: "cpu")
    assert by_dict["bias"].device is ag.device("cpu")
    assert by_fn["bias"].device is ag.device("cpu")
    if ag.cuda.device_count() > 1:
        moved = ag.load(tmp_path / "gpu.pt", map_location={"cuda:0": "cuda:1"})
        assert moved["weight"].device == ag.device("cuda:1")


def test_cuda_tensors_without_cuda_need_a_map_location(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "x.pt"
    with open(path, "wb") as f:
        np.savez(
            f,
            __asyncgrad__=np.frombuffer(
                b'{"format": "asyncgrad", "version": 1, "root": '
                b'{"type": "tensor", "data": "t0", "device": "cuda:0"}}',
                dtype=np.uint8,
            ),
            t0=np.ones(2),
        )
    monkeypatch.setattr(ag.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="Attempting to deserialize object on a CUDA device"):
        ag.load(path)
    assert ag.load(path, map_location="cpu").device is ag.device("cpu")
    with pytest.raises(TypeError, match="map_location must be"):
        ag.load(path, map_location=3)  # type: ignore[arg-type]


# ============================================================================= safetensors


def test_safetensors_round_trip(tmp_path: Path) -> None:
    pytest.importorskip("safetensors", reason=SAFETENSORS_REASON)
    sd = {name: build() for name, build in TENSORS.items() if name != "special"}
    path = tmp_path / "model.safetensors"
    ag.save(sd, path)
    back = ag.load(path)
    assert list(back) == list(sd)
    for k in sd:
        _same(sd[k], back[k])
    model = nn.Linear(3, 2)
    ag.save(model.state_dict(), path)
    model2 = nn.Linear(3, 2)
    model2.load_state_dict(ag.load(path))
    assert all(ag.equal(a, b) for a, b in zip(model.parameters(), model2.parameters(), strict=True))


def test_safetensors_hold_flat_dicts_of_tensors_only(tmp_path: Path) -> None:
    pytest.importorskip("safetensors", reason=SAFETENSORS_REASON)
    path = tmp_path / "x.safetensors"
    for bad, why in [
        ({"a": {"b": ag.ones(1)}}, "value at 'a' is of type dict"),
        ({"a": ag.ones(1), "step": 3}, "value at 'step' is of type int"),
        ({1: ag.ones(1)}, "key of type int"),
        ([ag.ones(1)], "object of type list"),
    ]:
        with pytest.raises(TypeError, match=rf"flat dict of str -> Tensor .*{why}.* \.npz path"):
            ag.save(bad, path)
    assert not path.exists()


def test_safetensors_written_elsewhere_load(tmp_path: Path) -> None:
    st = pytest.importorskip("safetensors.numpy", reason=SAFETENSORS_REASON)
    path = tmp_path / "other.safetensors"
    st.save_file({"w": np.arange(6, dtype=np.float32).reshape(2, 3), "m": np.array([True])}, path)
    out = ag.load(path)
    assert out["w"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert out["w"].dtype == ag.float32
    assert out["m"].dtype == ag.bool
    # Ours load elsewhere: a plain safetensors file.
    ag.save({"w": ag.ones(2, dtype=ag.float64)}, path)
    assert st.load_file(path)["w"].tolist() == [1.0, 1.0]


def test_corrupt_safetensors_raise(tmp_path: Path) -> None:
    pytest.importorskip("safetensors", reason=SAFETENSORS_REASON)
    path = tmp_path / "x.safetensors"
    ag.save({"w": ag.randn(10, 10)}, path)
    data = path.read_bytes()
    for cut in (9, 40, len(data) - 10):
        path.write_bytes(data[:cut])
        with pytest.raises(RuntimeError, match="is not a valid asyncgrad file"):
            ag.load(path)


@pytest.mark.parametrize("header_length", [0x4B50, 0x4B50 + 65536])
def test_a_safetensors_file_whose_header_length_begins_with_pk_loads(
    header_length: int, tmp_path: Path
) -> None:
    """A safetensors header of 19,280 bytes (or 65,536 more) is written "PK\\x00..." in little
    endian: the file is read as safetensors all the same, not taken for a zip."""
    pytest.importorskip("safetensors", reason=SAFETENSORS_REASON)
    values = np.arange(6, dtype=np.float32)
    header = json.dumps({"w": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24]}}).encode()
    header += b" " * (header_length - len(header))  # the format pads its header with spaces
    data = header_length.to_bytes(8, "little") + header + values.tobytes()
    assert data[:2] == b"PK"
    path = tmp_path / "padded.safetensors"
    path.write_bytes(data)
    np.testing.assert_array_equal(ag.load(path)["w"].numpy(), values)


def test_a_saved_file_has_the_permissions_open_gives() -> None:
    """A new file gets the umask's permissions (not a temporary file's private 0600); a
    replaced one keeps its own."""
    import tempfile

    umask = os.umask(0o022)
    os.umask(umask)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "model.npz"
        ag.save({"w": ag.ones(2)}, path)
        assert path.stat().st_mode & 0o777 == 0o666 & ~umask
        path.chmod(0o640)
        ag.save({"w": ag.zeros(2)}, path)
        assert path.stat().st_mode & 0o777 == 0o640
        assert ag.load(path)["w"].tolist() == [0.0, 0.0]
        assert [p.name for p in Path(d).iterdir()] == ["model.npz"]  # no temporary file left


# ----------------------------------------------------------------------------- PyTorch files
TORCH_REASON = "the files are written by PyTorch"


def test_a_torch_state_dict_loads_into_a_model_that_computes_the_same(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    torch.manual_seed(0)
    tm = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    path = tmp_path / "model.pt"
    torch.save(tm.state_dict(), path)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    model.load_state_dict(ag.load(path))
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    for name, value in tm.state_dict().items():  # the weights, bit for bit
        np.testing.assert_array_equal(model.state_dict()[name].numpy(), value.numpy())
    want = tm(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(model(ag.tensor(x)).detach().numpy(), want, rtol=1e-6, atol=1e-7)


def test_optimizer_state_parameters_dtypes_and_views_load_from_torch(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    m = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    opt = torch.optim.Adam(m.parameters(), lr=0.01)
    m(torch.randn(4, 3)).sum().backward()
    opt.step()
    base = torch.arange(12.0, dtype=torch.float64)
    saved = {
        "model": m.state_dict(),
        "opt": opt.state_dict(),
        "views": [base, base[2:8].view(2, 3), base[::3]],
        "param": torch.nn.Parameter(torch.ones(2)),
        "ints": torch.tensor([1, -2], dtype=torch.int32),
        "mask": torch.tensor([True, False]),
        "empty": torch.zeros(0, 3),
    }
    path = tmp_path / "all.pt"
    torch.save(saved, path)
    got = ag.load(path)
    for k, v in saved["model"].items():
        assert got["model"][k].dtype == ag.float32 if v.is_floating_point() else ag.int64
        np.testing.assert_array_equal(got["model"][k].numpy(), v.numpy(), err_msg=k)
    assert got["opt"]["param_groups"] == saved["opt"]["param_groups"]
    for i, state in saved["opt"]["state"].items():
        for k, v in state.items():
            np.testing.assert_array_equal(got["opt"]["state"][i][k].numpy(), v.numpy())
    b, v, s = got["views"]
    assert v.tolist() == [[2.0, 3.0, 4.0], [5.0, 6.0, 7.0]]
    assert s.tolist() == [0, 3, 6, 9]
    v[0, 0] = 100.0  # views saved with their base share its memory after loading, as in torch
    assert b[2].item() == 100.0
    assert s[0].item() == 0.0
    assert isinstance(got["param"], nn.Parameter)
    assert got["param"].requires_grad
    assert got["ints"].dtype == ag.int32
    assert got["ints"].tolist() == [1, -2]
    assert got["mask"].dtype == ag.bool
    assert got["empty"].shape == (0, 3)


@pytest.mark.cuda
def test_views_in_a_torch_file_share_memory_on_a_cuda_device(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    _needs_cuda()
    base = torch.arange(6.0)
    path = tmp_path / "views.pt"
    torch.save({"base": base, "pair": base[1:5].view(2, 2), "rows": base.expand(2, 6)}, path)
    got = ag.load(path, map_location="cuda")
    assert got["pair"].device == ag.device("cuda:0")
    got["base"][1] = -1.0
    assert got["pair"].tolist() == [[-1.0, 2.0], [3.0, 4.0]]
    assert got["rows"][1].tolist() == [0.0, -1.0, 2.0, 3.0, 4.0, 5.0]


def _torch_like_zip(path: Path, pickled: bytes, storages: dict[str, bytes] | None = None) -> None:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", pickled)
        z.writestr("archive/byteorder", "little")
        for key, raw in (storages or {}).items():
            z.writestr(f"archive/data/{key}", raw)


class _RunsCode:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (os.system, (f"touch {self.marker}",))


def test_a_torch_file_that_would_run_code_raises_and_runs_nothing(tmp_path: Path) -> None:
    """No torch needed: the file is made here. Its pickle calls os.system; loading it names
    the file and the object, and the command never runs."""
    marker = tmp_path / "ran"
    path = tmp_path / "evil.pt"
    _torch_like_zip(path, pickle.dumps({"w": _RunsCode(marker)}, protocol=2))
    with pytest.raises(RuntimeError, match=r"evil\.pt.*names (posix|os|nt)\.system") as info:
        ag.load(path)
    assert "nothing from the file ran" in str(info.value)
    assert not marker.exists()


def test_a_torch_file_of_a_whole_module_is_refused_naming_its_class(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    path = tmp_path / "whole.pt"
    torch.save(torch.nn.Linear(2, 2), path)
    with pytest.raises(RuntimeError, match=r"whole\.pt.*names torch\.nn\.modules\.linear\.Linear"):
        ag.load(path)


def test_a_torch_file_whose_tensor_overruns_its_storage_raises(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    path = tmp_path / "short.pt"
    torch.save({"w": torch.arange(16.0)}, path)
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    key = next(n for n in members if "/data/" in n)
    members[key] = members[key][:32]  # 8 of the 16 floats
    with zipfile.ZipFile(path, "w") as z:
        for n, raw in members.items():
            z.writestr(n, raw)
    with pytest.raises(RuntimeError, match=r"short\.pt.*needs elements 0\.\.15 of a storage of 8"):
        ag.load(path)


@pytest.mark.parametrize(
    ("arrays", "why"),
    [
        ({"s": np.array(["a", "b"])}, r"array 's' has dtype <U1, not a tensor's"),
        ({"d": np.array(["2026-01-01"], dtype="datetime64[D]")}, r"dtype datetime64\[D\]"),
        ({"r": np.zeros(2, dtype=[("x", "f4"), ("y", "i4")])}, r"array 'r' has dtype"),
    ],
)
def test_an_npz_of_what_no_tensor_holds_raises(
    arrays: dict[str, Any], why: str, tmp_path: Path
) -> None:
    path = tmp_path / "odd.npz"
    np.savez(path, **arrays)
    with pytest.raises(RuntimeError, match=r"odd\.npz.* " + why):
        ag.load(path)


def test_a_zip_member_that_is_not_an_npy_array_raises(tmp_path: Path) -> None:
    path = tmp_path / "mixed.npz"
    np.savez(path, w=np.ones(2))
    with zipfile.ZipFile(path, "a") as z:
        z.writestr("notes.txt", b"hello")
    with pytest.raises(RuntimeError, match=r"mixed\.npz.*zip member 'notes\.txt' is not a NumPy"):
        ag.load(path)


def test_max_bytes_refuses_a_file_that_inflates_before_inflating_it(tmp_path: Path) -> None:
    """A compressed .npz of a few hundred KB that would inflate to 256 MiB is refused from the
    sizes its zip declares; within the limit, files load as usual."""
    path = tmp_path / "bomb.npz"
    header = np.lib.format
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        with z.open("w.npy", "w", force_zip64=True) as out:
            header.write_array_header_2_0(
                out, {"descr": "|u1", "fortran_order": False, "shape": (1 << 28,)}
            )
            block = bytes(1 << 20)
            for _ in range(1 << 8):
                out.write(block)
    assert path.stat().st_size < 1 << 20
    with pytest.raises(RuntimeError, match=r"bomb\.npz' holds \d+ bytes once decompressed"):
        ag.load(path, max_bytes=100 << 20)
    small = tmp_path / "small.npz"
    ag.save({"w": ag.ones(100)}, small)
    assert ag.load(small, max_bytes=1 << 20)["w"].shape == (100,)
    with pytest.raises(RuntimeError, match=r"small\.npz' is larger than max_bytes=100"):
        ag.load(small, max_bytes=100)
    with pytest.raises(ValueError, match="max_bytes must be None or an int >= 0"):
        ag.load(small, max_bytes=-1)


@pytest.mark.parametrize(
    "metadata", [{"__asyncgrad__": ["x"]}, {"__asyncgrad__": {"a": 1}}, {"other": [1, 2]}]
)
def test_safetensors_metadata_that_is_not_strings_raises_a_runtime_error(
    metadata: dict[str, Any], tmp_path: Path
) -> None:
    """The format's metadata maps strings to strings; lists or objects there (a crafted file)
    raise the RuntimeError naming the file, not a TypeError from deep inside."""
    pytest.importorskip("safetensors", reason=SAFETENSORS_REASON)
    header = {"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}}
    raw = json.dumps({**header, "__metadata__": metadata}).encode()
    path = tmp_path / "crafted.safetensors"
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + np.zeros(3, np.float32).tobytes())
    with pytest.raises(RuntimeError, match=r"crafted\.safetensors' is not a valid asyncgrad file"):
        ag.load(path)
