"""ag.load of damaged files: seeded flips, cuts and edits of small valid files of each format
it reads. Each case raises the RuntimeError naming the file, or loads what the file really
holds; none raises anything else, runs long, or allocates more than such a file could hold.

The cases are fixed by their seeds and the files, which asyncgrad, NumPy and torch write the
same way each run (torch's files are those of the installed torch).
"""

from __future__ import annotations

import io
import struct
import time
import tracemalloc
import warnings
import zipfile
import zlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import nn

from .test_serialization import (
    SAFETENSORS_REASON,
    TORCH_REASON,
    _pickled,
    _same,
    _same_as_torch,
    _torch_tensor,
)

CASES: Final = 40  # per file and kind of damage
# No case may allocate more than this: the files are a few KB, and a deflated member may
# inflate 1032 times at most (See NOTE [Sizes from a file] in asyncgrad/backend/arrayio.py).
MOST_BYTES: Final = 4 << 20
SLOWEST_S: Final = 2.0  # a case that takes longer is a hang in the making


# ----------------------------------------------------------------------------- damage
def _damage(rng: np.random.Generator, raw: bytes) -> bytes:
    """``raw`` cut short, with a byte removed or added, one set to an edge value, or one or
    two flipped: what storage and transfers do to files."""
    b = bytearray(raw)
    kind = rng.random()
    at = int(rng.integers(0, len(b)))
    if kind < 0.2:
        return bytes(b[:at])
    if kind < 0.25:
        return bytes(b[:at] + b[at + 1 :])
    if kind < 0.3:
        return bytes(b[:at] + bytes([int(rng.integers(0, 256))]) + b[at:])
    if kind < 0.5:
        b[at] = (0x00, 0x01, 0x7F, 0x80, 0xFF)[int(rng.integers(0, 5))]
        return bytes(b)
    for _ in range(int(rng.integers(1, 3))):
        b[int(rng.integers(0, len(b)))] ^= int(rng.integers(1, 256))
    return bytes(b)


def _zip(members: dict[str, bytes], compression: int = zipfile.ZIP_STORED) -> bytes:
    """A zip of ``members``, the same bytes each run (no clock in its headers)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, raw in members.items():
            z.writestr(zipfile.ZipInfo(name), raw, compress_type=compression)
    return out.getvalue()


def _with_member(data: bytes, member: str, edit: Callable[[bytes], bytes]) -> bytes:
    """The zip ``data`` with ``member`` edited and written again, its CRC right: damage that
    reaches the reader of the member, past zipfile's checks."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        members = {i.filename: z.read(i) for i in z.infolist()}
        compression = z.getinfo(member).compress_type
    members[member] = edit(members[member])
    return _zip(members, compression)


def _without_clock(data: bytes) -> bytes:
    """The zip ``data`` (written by zipfile, which stamps the time) with every member's time
    set to zipfile's earliest, in its local header and in the directory."""
    out = bytearray(data)
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        count = len(z.infolist())
        for info in z.infolist():
            out[info.header_offset + 10 : info.header_offset + 14] = struct.pack("<HH", 0, 33)
    at = 0
    for _ in range(count):
        at = bytes(out).index(b"PK\x01\x02", at)
        out[at + 12 : at + 16] = struct.pack("<HH", 0, 33)
        at += 4
    return bytes(out)


# ----------------------------------------------------------------------------- the files
def _asyncgrad_npz() -> bytes:
    ag.manual_seed(0)
    w = ag.randn(3, 4)
    obj = {
        "model": {"w": w, "row": w[1], "b": nn.Parameter(ag.zeros(2))},
        "opt": {"state": {0: {"step": 3, "m": ag.ones(2, dtype=ag.float64)}}, "lr": 0.1},
        "plain": [None, True, "x", (1, 2.5)],
        "mask": ag.tensor([True, False]),
    }
    out = io.BytesIO()
    ag.save(obj, out)
    return _without_clock(out.getvalue())


def _compressed_npz() -> bytes:
    out = io.BytesIO()
    np.savez_compressed(out, a=np.arange(10.0), b=np.ones((2, 3), np.int32))
    return _without_clock(out.getvalue())


def _hand_made_torch_file() -> bytes:
    """A state dict as torch.save writes it, made without torch: a tensor and a view of it, a
    Parameter, an int64 buffer, and the dict's ``_metadata``."""
    hooks = b"ccollections\nOrderedDict\n)R"
    param = b"ctorch._utils\n_rebuild_parameter\n(" + _torch_tensor([3], [1], key="1", numel=3)
    items = (
        (_pickled("w") + _torch_tensor([2, 2], [2, 1]))
        + (_pickled("row") + _torch_tensor([2], [1], offset=2))
        + (_pickled("p") + param + b"\x88" + hooks + b"tR")
        + (_pickled("n") + _torch_tensor([2], [1], key="2", kind="Long", numel=2))
    )
    state = b"}" + _pickled("_metadata") + _pickled({"": {"version": 1}}) + b"s"
    pickled = b"\x80\x02ccollections\nOrderedDict\n)R(" + items + b"u" + state + b"b."
    return _zip(
        {
            "archive/data.pkl": pickled,
            "archive/byteorder": b"little",
            "archive/data/0": np.arange(4, dtype=np.float32).tobytes(),
            "archive/data/1": np.ones(3, dtype=np.float32).tobytes(),
            "archive/data/2": np.array([7, -7], dtype=np.int64).tobytes(),
            "archive/version": b"3\n",  # read by torch.load alone: the cases compare with it
        }
    )


def _torch_objects() -> Any:
    import torch

    torch.manual_seed(0)
    base = torch.arange(6.0)
    return OrderedDict(
        w=torch.randn(2, 3),
        view=base[1:5].view(2, 2),
        base=base,
        ints=torch.tensor([1, -2], dtype=torch.int32),
        mask=torch.tensor([True, False]),
        p=torch.nn.Parameter(torch.ones(2)),
        half=torch.tensor([1.5], dtype=torch.float16),
        conj=torch.tensor([1 + 2j]).conj(),
        expanded=torch.ones(1).expand(3),
        scalar=torch.tensor(3),
        plain={"lr": 0.1, "betas": (0.9, 0.99), "names": ["a"]},
    )


def _torch_file() -> bytes:
    import torch

    out = io.BytesIO()
    torch.save(_torch_objects(), out)
    return out.getvalue()


def _legacy_torch_file() -> bytes:
    import torch

    out = io.BytesIO()
    torch.save(_torch_objects(), out, _use_new_zipfile_serialization=False)
    return out.getvalue()


def _safetensors_file() -> bytes:
    import tempfile

    ag.manual_seed(0)
    sd = {"w": ag.randn(3, 2), "b": nn.Parameter(ag.ones(2)), "i": ag.tensor([1, 2, 3])}
    with tempfile.TemporaryDirectory() as d:  # ag.save writes safetensors to a path alone
        path = Path(d) / "model.safetensors"
        ag.save(sd, path)
        return path.read_bytes()


@dataclass(frozen=True)
class _File:
    make: Callable[[], bytes]
    needs: str | None = None  # a package, without which the file cannot be made
    member: str | None = None  # the zip member whose own reader the "member" cases reach
    loads: bool = True  # whether the undamaged file loads


FILES: Final = {
    "asyncgrad.npz": _File(_asyncgrad_npz, member="__asyncgrad__.npy"),
    "compressed.npz": _File(_compressed_npz, member="a.npy"),
    "hand_made.pt": _File(_hand_made_torch_file, member="archive/data.pkl"),
    "torch.pt": _File(_torch_file, needs="torch", member="archive/data.pkl"),
    "legacy.pt": _File(_legacy_torch_file, needs="torch", loads=False),
    "model.safetensors": _File(_safetensors_file, needs="safetensors"),
}
CASE_KINDS: Final = [(name, "bytes") for name in FILES] + [
    (name, "member") for name, f in FILES.items() if f.member is not None
]


# ----------------------------------------------------------------------------- oracles
def _same_tree(got: Any, want: Any) -> None:
    """Equal containers of bit-for-bit equal tensors and equal plain values."""
    if isinstance(want, ag.Tensor):
        _same(got, want)
    elif isinstance(want, dict):
        assert type(got) is type(want)
        assert list(got) == list(want)
        for k in want:
            _same_tree(got[k], want[k])
    elif isinstance(want, list | tuple):
        assert type(got) is type(want)
        assert len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            _same_tree(a, b)
    else:
        assert type(got) is type(want)
        assert got == want


def _well_formed(got: Any) -> None:
    """Every tensor in ``got`` holds a host array of a tensor's dtype, as a reader makes."""
    if isinstance(got, ag.Tensor):
        a = got._array
        assert type(a) is np.ndarray
        assert a.dtype.isnative
        assert a.dtype.kind in "biufc"
        assert got.shape == a.shape
    elif isinstance(got, dict):
        for v in got.values():
            _well_formed(v)
    elif isinstance(got, list | tuple):
        for v in got:
            _well_formed(v)


def _as_torch_loads(data: bytes) -> Any:
    """What torch.load makes of ``data`` in its safe mode, or None where torch refuses it or
    is not installed."""
    try:
        import torch
    except ImportError:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(io.BytesIO(data), weights_only=True)
    except Exception:
        return None


def _as_numpy_loads(got: Any, data: bytes) -> None:
    """A plain .npz loads as NumPy's own reader reads it (in this machine's byte order)."""
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    assert list(got) == list(arrays)
    for k, a in arrays.items():
        ours = got[k].numpy()
        assert ours.dtype == a.dtype.newbyteorder("=")
        assert ours.shape == a.shape
        assert np.array_equal(ours, a, equal_nan=a.dtype.kind in "fc")


def _as_safetensors_loads(got: Any, data: bytes, pristine: Any) -> None:
    """A safetensors file has no checksum: damaged values load as its reader reads them, and
    what asyncgrad's metadata says (requires_grad, Parameter) as in the undamaged file, unless
    the damage hit the metadata's key (then it is a file written elsewhere, of plain tensors)."""
    import safetensors.numpy

    arrays = safetensors.numpy.load(data)
    ours_kept = b'"__asyncgrad__"' in data[: 8 + int.from_bytes(data[:8], "little")]
    assert sorted(got) == sorted(arrays)
    for k, a in arrays.items():
        ours = got[k].detach().numpy()
        assert (ours.dtype, ours.shape, ours.tobytes()) == (a.dtype, a.shape, a.tobytes())
        want = pristine[k] if ours_kept else ag.Tensor._wrap(a)
        assert type(got[k]) is type(want)
        assert got[k].requires_grad == want.requires_grad


# ----------------------------------------------------------------------------- the fuzz
def _load_or_error(path: Path) -> Any:
    """What ag.load gives, or the RuntimeError it raises (any other exception propagates)."""
    try:
        return ag.load(path)
    except RuntimeError as e:
        return e


@pytest.mark.parametrize(("name", "kind"), CASE_KINDS)
def test_a_damaged_file_raises_naming_it_or_loads_what_it_holds(
    name: str, kind: str, tmp_path: Path
) -> None:
    spec = FILES[name]
    if spec.needs is not None:
        pytest.importorskip(
            spec.needs, reason=TORCH_REASON if spec.needs == "torch" else SAFETENSORS_REASON
        )
    data = spec.make()
    pristine = ag.load(io.BytesIO(data)) if spec.loads else None
    rng = np.random.default_rng(zlib.crc32(f"{name}/{kind}".encode()))
    path = tmp_path / name
    loaded = slowest = 0.0
    tracemalloc.start()
    try:
        for case in range(CASES):
            if kind == "member":
                assert spec.member is not None
                damaged = _with_member(data, spec.member, lambda raw: _damage(rng, raw))
            else:
                damaged = _damage(rng, data)
            path.write_bytes(damaged)
            tracemalloc.reset_peak()
            held = tracemalloc.get_traced_memory()[0]
            start = time.perf_counter()
            got = _load_or_error(path)
            slowest = max(slowest, time.perf_counter() - start)
            peak = tracemalloc.get_traced_memory()[1] - held
            assert peak < MOST_BYTES, f"case {case} allocated {peak} bytes"
            if isinstance(got, RuntimeError):
                assert str(got).startswith(
                    f"ag.load: {str(path)!r} is not a valid asyncgrad file: "
                )
                continue
            loaded += 1
            assert spec.loads, f"case {case} loaded a file of a format that is not read"
            if name.endswith(".safetensors"):
                _as_safetensors_loads(got, damaged, pristine)
            elif kind == "bytes":  # every byte a zip reader uses is checked by its CRC
                _same_tree(got, pristine)
            else:  # the member says something else, which its reader took at its word
                _well_formed(got)
                if name == "compressed.npz":
                    _as_numpy_loads(got, damaged)
                want = _as_torch_loads(damaged) if name.endswith(".pt") else None
                if want is not None:
                    _same_as_torch(got, want)
    finally:
        tracemalloc.stop()
    assert slowest < SLOWEST_S
    assert loaded < CASES  # damage that never raised would say the cases reach no reader
