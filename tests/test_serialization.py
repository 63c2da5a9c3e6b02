"""ag.save / ag.load: exact round trips, state dicts across devices, and files that are not ours."""

from __future__ import annotations

import io
import json
import math
import os
import pickle
import pickletools
import struct
import tracemalloc
import zipfile
import zlib
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

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
    path = tmp_path / "views.npz"
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

    again = tmp_path / "again.npz"  # loaded views saved again still share
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
    path = tmp_path / "part.npz"
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
    path = tmp_path / "reversed.npz"
    ag.save({"rev": ag.from_numpy(host[::-1]), "mid": ag.from_numpy(host[2:5])}, path)
    assert sorted(_entries(path).values()) == [(10,)]
    got = ag.load(path)
    assert got["rev"].tolist() == host[::-1].tolist()
    got["mid"][0] = -5.0
    assert got["rev"][7].item() == -5.0


def test_a_file_without_views_keeps_the_first_format_version(tmp_path: Path) -> None:
    path = tmp_path / "plain.npz"
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
    path = tmp_path / "gpu_views.npz"
    ag.save({"w": w, "row": w[2], "t": w.t()}, path)
    assert sorted(_entries(path).values()) == [(12,)]
    for where in (None, "cpu"):
        got = ag.load(path, map_location=where)
        assert got["row"].device == ag.device(where or "cuda:0")
        with ag.no_grad():
            got["w"].add_(1.0)
        assert got["row"].tolist() == [9.0, 10.0, 11.0, 12.0]
        assert got["t"][0].tolist() == [1.0, 5.0, 9.0]
    cpu = tmp_path / "cpu_views.npz"
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
        (b'{"format": "asyncgrad", "version": 1, "root": {"type": ["dict"]}}', "unknown node type"),
        (
            b'{"format": "asyncgrad", "version": 1, "root": '
            b'{"type": "tensor", "data": "t0", "requires_gr{d": true}}',
            "tensor node has the unknown field 'requires_gr{d'",
        ),
        (
            b'{"format": "asyncgrad", "version": 1, "root": '
            b'{"type": "tensor", "data": "t0", "class": "Parametez"}}',
            "class 'Parametez' is not one this reader knows",
        ),
        (b'{"format": "asyncgrad", "version": 1, "root": 1, "rooot": 2}', "unknown field 'rooot'"),
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
    path = tmp_path / "views.npz"
    torch.save({"base": base, "pair": base[1:5].view(2, 2), "rows": base.expand(2, 6)}, path)
    got = ag.load(path, map_location="cuda")
    assert got["pair"].device == ag.device("cuda:0")
    got["base"][1] = -1.0
    assert got["pair"].tolist() == [[-1.0, 2.0], [3.0, 4.0]]
    assert got["rows"][1].tolist() == [0.0, -1.0, 2.0, 3.0, 4.0, 5.0]


def _torch_like_zip(
    path: Path,
    pickled: bytes,
    storages: dict[str, bytes] | None = None,
    compression: int = zipfile.ZIP_STORED,
) -> None:
    with zipfile.ZipFile(path, "w", compression=compression) as z:
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
    with pytest.raises(RuntimeError, match=r"short\.pt.*storage '0' holds 8 float32.* says 16"):
        ag.load(path)
    # A storage as long as its reference says, under a layout that reads past it.
    _torch_like_zip(path, b"\x80\x02" + _torch_tensor([16], [1], numel=8) + b".", {"0": bytes(32)})
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


# ============================================================================= corrupt files
# Every defect a reader meets is the RuntimeError naming the file, with the reader's own
# exception as its cause; sizes a file declares are checked against its bytes before anything
# is allocated. tests/test_serialization_fuzz.py flips and cuts bytes of small files at random.


def _pickled(value: Any) -> bytes:
    """The opcodes that push ``value`` (plain values only), without protocol, memo or stop."""
    return pickletools.optimize(pickle.dumps(value, protocol=2))[2:-1]


def _torch_tensor(
    size: list[int],
    stride: list[int],
    *,
    numel: int = 4,
    offset: int = 0,
    key: str = "0",
    kind: str = "Float",
    storage_type: bytes | None = None,
) -> bytes:
    """The opcodes of ``torch._utils._rebuild_tensor_v2`` over storage ``key`` (of ``numel``
    elements), as torch.save writes them (pickle protocol 2); ``storage_type`` replaces the
    opcodes of the storage type."""
    if storage_type is None:
        storage_type = f"ctorch\n{kind}Storage\n".encode()
    storage = b"(" + _pickled("storage") + storage_type + _pickled(key) + _pickled("cpu")
    hooks = b"ccollections\nOrderedDict\n)R"  # torch.save's backward hooks: always none
    args = _pickled(offset) + _pickled(tuple(size)) + _pickled(tuple(stride)) + b"\x89" + hooks
    return (
        b"ctorch._utils\n_rebuild_tensor_v2\n("
        + (storage + _pickled(numel) + b"tQ")
        + (args + b"tR")
    )


# Far below the 256 MiB the files below declare (ag.load(max_bytes=...) reads a file with a
# buffer of that size).
SMALL: Final = 4 << 20
FOUR_FLOATS: Final = np.arange(4, dtype=np.float32).tobytes()
A_STATE_DICT: Final = b"\x80\x02}(" + _pickled("w") + _torch_tensor([2, 2], [2, 1]) + b"u."


def _member_start(data: bytes, name: str) -> int:
    """Where the (possibly compressed) bytes of the zip member ``name`` begin in ``data``."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        at = z.getinfo(name).header_offset
    name_len, extra_len = struct.unpack("<HH", data[at + 26 : at + 30])
    return int(at + 30 + name_len + extra_len)


def _peak_bytes(f: Callable[[], Any]) -> int:
    """The most memory Python and NumPy held at once while ``f`` ran (tracemalloc's peak)."""
    tracemalloc.start()
    try:
        f()
    except RuntimeError:
        pass
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def test_a_hand_made_torch_file_loads(tmp_path: Path) -> None:
    """The helpers above write what torch.save writes: the tests below corrupt it."""
    path = tmp_path / "made.pt"
    _torch_like_zip(path, A_STATE_DICT, {"0": FOUR_FLOATS})
    assert ag.load(path)["w"].tolist() == [[0.0, 1.0], [2.0, 3.0]]


@pytest.mark.parametrize("member", ["archive/data.pkl", "archive/byteorder", "archive/data/0"])
def test_a_torch_member_that_fails_its_crc_raises_naming_the_file(
    member: str, tmp_path: Path
) -> None:
    path = tmp_path / "crc.pt"
    _torch_like_zip(path, A_STATE_DICT, {"0": FOUR_FLOATS})
    data = bytearray(path.read_bytes())
    data[_member_start(bytes(data), member)] ^= 0x01
    path.write_bytes(data)
    with pytest.raises(
        RuntimeError, match=rf"crc\.pt' is not a valid asyncgrad file: .*{member}.*CRC"
    ) as info:
        ag.load(path)
    assert isinstance(info.value.__cause__, zipfile.BadZipFile)


def test_a_torch_member_whose_deflate_stream_is_corrupt_raises_naming_the_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "deflate.pt"
    _torch_like_zip(path, A_STATE_DICT, {"0": FOUR_FLOATS}, zipfile.ZIP_DEFLATED)
    data = bytearray(path.read_bytes())
    data[_member_start(bytes(data), "archive/data.pkl")] = 0xFF  # block type 3: reserved
    path.write_bytes(data)
    with pytest.raises(
        RuntimeError, match=r"deflate\.pt' is not a valid asyncgrad file: .*archive/data\.pkl"
    ) as info:
        ag.load(path)
    assert isinstance(info.value.__cause__, zlib.error)


def test_a_torch_file_written_without_crcs_loads(tmp_path: Path) -> None:
    """torch.save writes 0 for every CRC when told not to compute them
    (``torch.serialization.set_crc32_options(False)``), and torch.load reads such files: so
    does ag.load, where a file with CRCs has each one checked."""
    path = tmp_path / "nocrc.pt"
    _torch_like_zip(path, A_STATE_DICT, {"0": FOUR_FLOATS})
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as z:
        infos = z.infolist()
    central = bytes(data).index(b"PK\x01\x02")
    for info in infos:
        data[info.header_offset + 14 : info.header_offset + 18] = bytes(4)
        central = bytes(data).index(b"PK\x01\x02", central)
        data[central + 16 : central + 20] = bytes(4)
        central += 4
    path.write_bytes(data)
    assert ag.load(path)["w"].tolist() == [[0.0, 1.0], [2.0, 3.0]]
    data[_member_start(bytes(data), "archive/data/0") + 3] ^= 0x80  # unchecked, as in torch
    path.write_bytes(data)
    assert ag.load(path)["w"].tolist() == [[-0.0, 1.0], [2.0, 3.0]]


def test_a_torch_file_torch_wrote_without_crcs_loads_as_torch_loads_it(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    saved = {"w": torch.randn(3, 4), "n": torch.arange(5)}
    path = tmp_path / "nocrc.pt"
    was = torch.serialization.get_crc32_options()
    torch.serialization.set_crc32_options(False)
    try:
        torch.save(saved, path)
    finally:
        torch.serialization.set_crc32_options(was)
    with zipfile.ZipFile(path) as z:
        assert all(i.CRC == 0 for i in z.infolist())
    got = ag.load(path)
    want = torch.load(path, weights_only=True)
    for k in saved:
        np.testing.assert_array_equal(got[k].numpy(), want[k].numpy())


TOO_BIG: Final = "larger than an array can be"


@pytest.mark.parametrize(
    ("size", "stride", "why"),
    [
        ([2**63], [0], TOO_BIG),  # a dimension past int64
        ([2**62], [0], TOO_BIG),  # elements past what an array may hold, once in bytes
        ([2**31, 2**31, 4], [0, 0, 0], TOO_BIG),
        ([1, 2], [2**62, 1], TOO_BIG),  # a stride past int64 once in bytes
        ([2, 1], [-(2**62), 1], TOO_BIG),
        ([2, 1], [-(2**60), 1], r"needs elements -1152921504606846976\.\.0 of a storage of 4"),
    ],
)
def test_a_torch_tensor_layout_past_int64_raises_naming_the_file(
    size: list[int], stride: list[int], why: str, tmp_path: Path
) -> None:
    path = tmp_path / "big.pt"
    _torch_like_zip(path, b"\x80\x02" + _torch_tensor(size, stride) + b".", {"0": FOUR_FLOATS})
    with pytest.raises(RuntimeError, match=rf"big\.pt' is not a valid asyncgrad file: .*{why}"):
        ag.load(path)


def test_a_huge_expanded_torch_tensor_loads_as_a_view_without_allocating(tmp_path: Path) -> None:
    """torch saves ``torch.zeros(1).expand(2**40)`` as one element and a stride of 0: that is
    what the file says, and it loads as torch loads it, a read-only view of that element."""
    path = tmp_path / "expanded.pt"
    _torch_like_zip(path, b"\x80\x02" + _torch_tensor([2**40], [0]) + b".", {"0": FOUR_FLOATS})
    assert _peak_bytes(lambda: ag.load(path)) < SMALL
    t = ag.load(path)
    assert t.shape == (2**40,)
    assert t[2**40 - 1].item() == 0.0


def test_a_torch_storage_of_another_size_than_its_reference_says_raises(tmp_path: Path) -> None:
    path = tmp_path / "numel.pt"
    _torch_like_zip(
        path, b"\x80\x02" + _torch_tensor([2], [1], numel=99) + b".", {"0": FOUR_FLOATS}
    )
    with pytest.raises(RuntimeError, match=r"numel\.pt' .*storage '0' .*99"):
        ag.load(path)


@pytest.mark.parametrize(
    "pickled",
    [
        b"\x8e" + (1 << 28).to_bytes(8, "little") + b"abc.",  # BINBYTES8 of 256 MiB
        b"B" + (1 << 28).to_bytes(4, "little") + b"abc.",  # BINBYTES
        b"\x96" + (1 << 28).to_bytes(8, "little") + b"abc.",  # BYTEARRAY8
        b"\x8d" + (1 << 28).to_bytes(8, "little") + b"abc.",  # BINUNICODE8
        b"N" + b"r" + (1 << 24).to_bytes(4, "little") + b".",  # LONG_BINPUT: a memo of 2**24
    ],
)
def test_a_torch_pickle_that_declares_huge_sizes_raises_without_allocating_them(
    pickled: bytes, tmp_path: Path
) -> None:
    path = tmp_path / "sizes.pt"
    _torch_like_zip(path, b"\x80\x02" + pickled, {"0": FOUR_FLOATS})
    with pytest.raises(RuntimeError, match=r"sizes\.pt' is not a valid asyncgrad file"):
        ag.load(path)
    assert _peak_bytes(lambda: ag.load(path)) < SMALL


@pytest.mark.parametrize(
    "pickled",
    [
        # BUILD on a tensor: torch.save never writes one (a tensor's state is in its arguments)
        _torch_tensor([4], [1]) + b"N}" + _pickled("_array") + _pickled("x") + b"s\x86b.",
        _torch_tensor([4], [1], key="1", kind="Long")
        + (b"N}" + _pickled("requires_grad") + b"\x88s\x86b."),
        _torch_tensor([4], [1]) + b"}" + _pickled("x") + b"Ns" + b"b.",
        # BUILD on a storage type, then a storage of it
        b"ctorch\nFloatStorage\nq\x00N}"
        + (_pickled("dtype") + _pickled("U1") + b"s\x86b0")
        + (_torch_tensor([4], [1], storage_type=b"h\x00") + b"."),
    ],
)
def test_a_torch_pickle_that_changes_what_it_built_raises(pickled: bytes, tmp_path: Path) -> None:
    path = tmp_path / "build.pt"
    _torch_like_zip(path, b"\x80\x02" + pickled, {"0": FOUR_FLOATS, "1": np.arange(4).tobytes()})
    with pytest.raises(RuntimeError, match=r"build\.pt' is not a valid asyncgrad file"):
        ag.load(path)


@pytest.mark.parametrize(
    ("offset", "patch", "why"),
    [
        (6, 0x01, "encrypted"),  # the local header's flags: encrypted
        (8, 99, "compression"),  # the local header's compression method
    ],
)
def test_a_zip_member_that_cannot_be_read_raises_naming_the_file(
    offset: int, patch: int, why: str, tmp_path: Path
) -> None:
    path = tmp_path / "odd.pt"
    _torch_like_zip(path, A_STATE_DICT, {"0": FOUR_FLOATS})
    data = bytearray(path.read_bytes())
    central = bytes(data).index(b"PK\x01\x02")  # the first member's entry in the directory
    data[offset] |= patch
    data[central + offset + 2] |= patch
    path.write_bytes(data)
    with pytest.raises(RuntimeError, match=rf"odd\.pt' is not a valid asyncgrad file: .*{why}"):
        ag.load(path)


def _npy_header(shape: tuple[int, ...], descr: str = "<f8") -> bytes:
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        out, {"descr": descr, "fortran_order": False, "shape": shape}
    )
    return out.getvalue()


def test_an_npy_header_that_declares_more_than_the_file_holds_raises_without_allocating_it(
    tmp_path: Path,
) -> None:
    """An .npy header says 256 MiB of float64 in a file of a few hundred bytes: refused from
    the member's size, with max_bytes or without (its limit promises the arrays' size too)."""
    path = tmp_path / "claims.npz"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("w.npy", _npy_header((1 << 25,)) + bytes(8))
    for limit in (None, 1 << 20):
        with pytest.raises(RuntimeError, match=r"claims\.npz' is not a valid asyncgrad file"):
            ag.load(path, max_bytes=limit)
        assert _peak_bytes(lambda: ag.load(path, max_bytes=limit)) < SMALL  # noqa: B023
    bare = tmp_path / "claims.npy"
    bare.write_bytes(_npy_header((1 << 25,)) + bytes(8))
    with pytest.raises(RuntimeError, match=r"claims\.npy' is not a valid asyncgrad file"):
        ag.load(bare)
    assert _peak_bytes(lambda: ag.load(bare)) < SMALL


def test_an_npy_array_with_more_bytes_than_its_header_says_raises(tmp_path: Path) -> None:
    """A header whose shape was damaged to a smaller one would load part of the data."""
    path = tmp_path / "short_header.npz"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("w.npy", _npy_header((2,)) + np.arange(4.0).tobytes())
    with pytest.raises(
        RuntimeError, match=r"short_header\.npz' .*'w' .*needs 16 bytes, and its member holds 32"
    ):
        ag.load(path)


def test_a_zip_member_that_declares_more_than_its_compressed_bytes_hold_raises(
    tmp_path: Path,
) -> None:
    path = tmp_path / "inflates.npz"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("w.npy", _npy_header((4,)) + bytes(32))
    data = bytearray(path.read_bytes())
    central = bytes(data).index(b"PK\x01\x02")
    data[central + 24 : central + 28] = (2**31).to_bytes(4, "little")  # its size, inflated
    path.write_bytes(data)
    with pytest.raises(RuntimeError, match=r"inflates\.npz' is not a valid asyncgrad file"):
        ag.load(path)
    assert _peak_bytes(lambda: ag.load(path)) < SMALL


def test_an_npz_array_in_another_byte_order_loads_in_this_machines(tmp_path: Path) -> None:
    path = tmp_path / "big_endian.npz"
    np.savez(path, w=np.arange(3, dtype=">f4"))
    w = ag.load(path)["w"]
    assert w.dtype == ag.float32
    assert w.tolist() == [0.0, 1.0, 2.0]


@pytest.mark.parametrize(
    ("ours", "why"),
    [
        ({"format": "asyncgrad", "version": 2, "tensors": [[["w"], {}]]}, "by a list"),
        ({"format": "asyncgrad", "version": 2, "tensors": [[{"w": 1}, {}]]}, "by a dict"),
        ({"format": "asyncgrad", "version": 2, "tensors": [["w", {}], ["w", {}]]}, "twice"),
        ({"format": "asyncgrad", "version": 2, "tensors": [["w", {"devkce": "cpu"}]]}, "devkce"),
        ({"format": "asyncgrad", "version": 2, "tensors": [["w", {"class": "P"}]]}, "class 'P'"),
        ({"format": "asyncgrad", "version": 3, "tensors": []}, "format version 3"),
        ({"format": "asyncgrad-", "version": 2, "tensors": []}, "not an asyncgrad header"),
    ],
)
def test_safetensors_metadata_of_ours_that_is_damaged_raises(
    ours: Any, why: str, tmp_path: Path
) -> None:
    """Its names are strings, each tensor's once, with fields and values this reader knows:
    a field whose name was damaged would otherwise load as if absent."""
    pytest.importorskip("safetensors", reason=SAFETENSORS_REASON)
    ours = json.dumps(ours)
    header = {"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}}
    raw = json.dumps({**header, "__metadata__": {"__asyncgrad__": ours}}).encode()
    path = tmp_path / "named.safetensors"
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + bytes(12))
    with pytest.raises(
        RuntimeError, match=rf"named\.safetensors' is not a valid asyncgrad file: .*{why}"
    ):
        ag.load(path)


def test_a_second_reference_to_a_torch_storage_is_checked_too(tmp_path: Path) -> None:
    path = tmp_path / "refs.pt"
    first, second = _torch_tensor([2], [1]), _torch_tensor([2], [1], numel=16)
    _torch_like_zip(path, b"\x80\x02(" + first + second + b"l.", {"0": FOUR_FLOATS})
    with pytest.raises(RuntimeError, match=r"refs\.pt' .*storage '0' holds 4 float32.* says 16"):
        ag.load(path)


@pytest.mark.parametrize(
    ("pickled", "why"),
    [
        (_torch_tensor([4], [1])[:-2] + _pickled(3) + b"tR.", "metadata 3"),
        (_torch_tensor([4], [1])[:-2] + b"}" + _pickled("sparse") + b"\x88stR.", "sparse"),
        (_torch_tensor([4], [1]).replace(b")R", _pickled(([(1, 2)],)) + b"R") + b".", "arguments"),
        (_torch_tensor([4], [1]).replace(b")R", b")RNK\x07") + b".", "TypeError.* positional"),
    ],
)
def test_a_torch_tensor_with_malformed_arguments_raises(
    pickled: bytes, why: str, tmp_path: Path
) -> None:
    """torch.save gives each tensor empty backward hooks, and metadata only for the bits it
    knows; anything else is no file torch wrote."""
    path = tmp_path / "args.pt"
    _torch_like_zip(path, b"\x80\x02" + pickled, {"0": FOUR_FLOATS})
    with pytest.raises(RuntimeError, match=rf"args\.pt' is not a valid asyncgrad file: .*{why}"):
        ag.load(path)


def test_torch_tensors_marked_conjugated_or_negated_load_with_their_values(
    tmp_path: Path,
) -> None:
    """torch saves ``x.conj()`` as x's storage and a conjugate bit, ``x.conj().imag`` as a
    view of it and a negative bit: the values load as torch's ``resolve_conj()`` gives."""
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    z, y = torch.tensor([1 + 2j, 3 - 1j]), torch.tensor([[4 - 5j, 6j]])
    saved = {"conj": z.conj(), "t": z.conj()[None].t(), "neg": y.conj().imag, "both": -y.conj()}
    assert saved["conj"].is_conj()
    assert saved["neg"].is_neg()
    path = tmp_path / "bits.pt"
    torch.save(saved, path)
    got = ag.load(path)
    for k, v in saved.items():
        np.testing.assert_array_equal(got[k].numpy(), v.resolve_conj().resolve_neg().numpy())
    got["conj"].numpy()[1] = 7j  # views with the same bits share their storage, as in torch
    assert got["t"].numpy()[1, 0] == 7j


def test_a_huge_expanded_torch_tensor_with_a_bit_loads_without_allocating_it(
    tmp_path: Path,
) -> None:
    """The bit is applied to the storage, not to the 2**30 elements of the view."""
    path = tmp_path / "expanded_conj.pt"
    bit = b"}" + _pickled("conj") + b"\x88s"
    tensor = _torch_tensor([2**30], [0], kind="ComplexFloat", numel=2)[:-2] + bit + b"tR"
    _torch_like_zip(path, b"\x80\x02" + tensor + b".", {"0": np.complex64(1 + 2j).tobytes() * 2})
    assert _peak_bytes(lambda: ag.load(path)) < SMALL
    t = ag.load(path)
    assert t.shape == (2**30,)
    assert t[2**30 - 1].numpy() == 1 - 2j


def _same_as_torch(got: Any, want: Any, where: str = "obj") -> None:
    """``got`` (from ag.load) holds what ``want`` (from torch.load) holds, bit for bit."""
    import torch

    if isinstance(want, torch.Tensor):
        assert isinstance(got, ag.Tensor), where
        assert isinstance(got, nn.Parameter) == isinstance(want, torch.nn.Parameter), where
        assert got.requires_grad == want.requires_grad, where
        host = want.detach().resolve_conj().resolve_neg().numpy()
        assert got.dtype == host.dtype, where
        assert got.shape == host.shape, where
        ours = np.ascontiguousarray(got.detach().numpy())
        assert ours.tobytes() == np.ascontiguousarray(host).tobytes(), where
    elif isinstance(want, dict):
        assert type(got) is type(want), where
        assert list(got) == list(want), where
        for k in want:
            _same_as_torch(got[k], want[k], f"{where}[{k!r}]")
    elif isinstance(want, list | tuple):
        assert type(got) is type(want), where
        assert len(got) == len(want), where
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            _same_as_torch(a, b, f"{where}[{i}]")
    else:
        assert type(got) is type(want), where
        assert got == want or (got != got and want != want), where  # NaN is NaN


def _torch_objects() -> dict[str, Any]:
    """What torch.save writes in a checkpoint: every dtype both read, views, bits, containers."""
    import torch

    torch.manual_seed(0)
    dtypes = [
        torch.float32, torch.float64, torch.float16, torch.int8, torch.int16, torch.int32,
        torch.int64, torch.uint8, torch.bool, torch.complex64, torch.complex128,
    ]  # fmt: skip
    base = torch.arange(24.0).reshape(4, 6)
    m = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    m(torch.randn(4, 3)).sum().backward()
    opt.step()
    return {
        "dtypes": [(torch.randn(3) * 50).to(d) for d in dtypes],
        "shapes": [torch.tensor(2.5), torch.zeros(0, 3), torch.ones(2, 0, dtype=torch.int64)],
        "views": [base, base[1:3, ::2], base.t(), base[2], base[:1].expand(3, 6), base.view(-1)],
        "bits": [torch.tensor([1 + 1j]).conj(), torch.tensor([2 - 3j]).conj().imag],
        "grad": [torch.nn.Parameter(torch.ones(2)), torch.randn(2, requires_grad=True)],
        "frozen": torch.nn.Parameter(torch.ones(1), requires_grad=False),
        "model": m.state_dict(),
        "opt": opt.state_dict(),
        "plain": (None, True, 3, -(2**70), 1.5, float("nan"), "text", {1: "one"}, [()]),
    }


def test_files_torch_writes_load_as_torch_loads_them(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    path = tmp_path / "all.pt"
    torch.save(_torch_objects(), path)
    got = ag.load(path)
    _same_as_torch(got, torch.load(path, weights_only=True))
    assert type(got["model"]) is OrderedDict
    got["views"][0][1, 0] = -1.0  # views share their base's memory, as torch's do
    assert got["views"][1][0, 0].item() == -1.0
    assert got["views"][2][0, 1].item() == -1.0
    assert got["views"][5][6].item() == -1.0


def test_a_torch_file_in_its_legacy_format_raises_naming_the_file(tmp_path: Path) -> None:
    """torch.save(..., _use_new_zipfile_serialization=False) writes one pickle stream with
    the storages after it: not read (it needs pickle's own loader for its header)."""
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    path = tmp_path / "legacy.pt"
    torch.save({"w": torch.ones(2)}, path, _use_new_zipfile_serialization=False)
    with pytest.raises(RuntimeError, match=r"legacy\.pt' is not a valid asyncgrad file"):
        ag.load(path)


def _zip_bytes(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, raw in members.items():
            z.writestr(zipfile.ZipInfo(name), raw)
    return out.getvalue()


def test_a_zip_directory_that_drops_members_raises(tmp_path: Path) -> None:
    """zipfile reads a zip's directory by its length in bytes: a damaged length (or a
    member's comment length) would drop members without a word."""
    data = bytearray(_zip_bytes({"a.npy": _npy_header((1,)) + bytes(8), "b.npy": b""}))
    end = bytes(data).rindex(b"PK\x05\x06")
    data[end + 12 : end + 16] = (0).to_bytes(4, "little")  # the directory's length in bytes
    path = tmp_path / "dropped.npz"
    path.write_bytes(data)
    with pytest.raises(RuntimeError, match=r"dropped\.npz' .*lists 0 members.* end record 2"):
        ag.load(path)


def test_a_zip_that_holds_a_member_twice_raises(tmp_path: Path) -> None:
    path = tmp_path / "twice.npz"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("w.npy", _npy_header((1,)) + np.float64(1.0).tobytes())
        with pytest.warns(UserWarning, match="Duplicate name"):
            z.writestr("w.npy", _npy_header((1,)) + np.float64(2.0).tobytes())
    with pytest.raises(RuntimeError, match=r"twice\.npz' .*'w\.npy' twice"):
        ag.load(path)
