"""``ag.save`` and ``ag.load``: tensors and nested containers of them. Nothing is pickled or
unpickled by Python's pickler: torch's ``.pt`` files are written opcode by opcode (See NOTE
[Writing PyTorch files]) and read by an unpickler that knows only tensors and containers.

NOTE [Saved file format]
``ag.save(obj, path)`` writes a ``.npz`` archive (NumPy's zip of ``.npy`` files): one entry per
distinct tensor (``t0``, ``t1``, ...), holding its host data with its exact dtype and shape, and
an entry ``__asyncgrad__`` holding, as UTF-8 JSON, the object's structure, in which tensors are
``{"type": "tensor", "data": "t0", "device": "cuda:0", "requires_grad": true, ...}`` and JSON
objects appear only as such tagged nodes (dicts are ``{"type": "dict", "items": [[k, v], ...]}``
so their keys keep their types: an optimizer's state is keyed by ints). A tensor that appears
twice in ``obj`` is stored once and loads as one tensor; tensors that share memory (views) are
stored as views of one storage (See NOTE [Views in saved files]). A path ending in ``.safetensors``
writes a safetensors file instead, which holds a flat ``{str: Tensor}`` dict (a state dict), with
each tensor's device and requires_grad in the file's metadata.

Loading reads arrays without pickle and the structure with ``json``: a file can describe
data, never code, so loading an untrusted file executes nothing. Anything malformed (truncated,
random bytes, a zip member that fails its CRC, a pickled object array, a structure that names a
missing array, a size the file's bytes cannot hold) raises a ``RuntimeError`` that names the
file, whichever reader met it, with the exception that reader raised (if one did) as its
``__cause__``; nothing of a size the file declares is allocated before the file's bytes are
checked to hold it (See NOTE [Sizes from a file] in asyncgrad/backend/arrayio.py).

NOTE [Views in saved files]
``torch.save`` keeps views: tensors that share a storage share it again after loading, so a
base and its views, a tied weight and its transpose, load as they were saved. ``ag.save`` does
the same. Saved tensors on one device whose bytes overlap, directly or through others, form a
group; the group is stored once, as a 1-d storage entry (``s0``, ``s1``, ...) spanning their
bytes (only what they cover, where torch writes a view's whole storage), and the header's
``"views"`` table gives each member's layout in it: element offset, size and strides
(negative ones too). Loading moves each storage to its device once and makes the members views
of it there (``arrayio.strided_view``, which checks each layout against the storage first), as
``ag.load`` does for PyTorch's files. A layout whose elements may share memory (an expanded
tensor) loads read-only, so writing to it raises as it did before saving. Files with views are
version 2; a file without any stays version 1, which every reader reads. Tensors that share an
allocation without overlapping (``w[0]`` and ``w[2]`` without ``w``) are saved apart: only their
``data_ptr()`` would tell. Nor is a group whose members differ in dtype (NumPy
arrays viewed as another dtype through ``from_numpy``) kept as one: each is saved on its own.
A safetensors file has no views: each tensor is written on its own.
"""

from __future__ import annotations

import io
import os
import zipfile
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import IO, Any, Final, NamedTuple

from . import backend, cuda, dtypes
from ._tensor import Tensor
from .backend import CPU, Device
from .backend.arrayio import (
    ArrayFileError,
    byte_span,
    open_zip,
    read_member,
    read_npz,
    read_safetensors,
    span_of,
    strided_view,
    write_npz,
    write_safetensors,
)
from .nn.modules import Parameter

__all__ = ["load", "save"]

FORMAT_VERSION: Final = 2  # 2 added views (See NOTE [Views in saved files])
# The .npz entry that holds the structure, and the safetensors metadata key that holds the
# tensors' devices and requires_grad flags.
STRUCTURE_KEY: Final = "__asyncgrad__"

FileLike = str | os.PathLike[str] | IO[bytes]
MapLocation = str | Device | dict[Any, Any] | Callable[[str], Any] | None


def save(obj: Any, f: FileLike) -> None:
    """Save tensors, and dicts, lists and tuples of them and of plain values, to ``f``.

    Args:
        obj: a Tensor, or nested dicts/lists/tuples of Tensors, ``None``, bools, ints, floats,
            strings, dtypes and devices (a state dict, an optimizer's state dict).
        f: a path, or a binary file object. A path ending in ``.safetensors`` writes a
            safetensors file (``obj`` must then be a flat ``{str: Tensor}`` dict); one ending
            in ``.pt`` or ``.pth`` torch's zip format, which ``torch.load(f,
            weights_only=True)`` reads (See NOTE [Writing PyTorch files]); anything else an
            ``.npz`` archive (See NOTE [Saved file format]). A path is replaced whole,
            never left half-written.

    Raises:
        TypeError: ``obj`` holds a value of another type (the message says where).

    Example:
        >>> import asyncgrad as ag, io
        >>> buf = io.BytesIO()
        >>> ag.save({"w": ag.ones(2), "step": 3}, buf)
        >>> ag.load(io.BytesIO(buf.getvalue()))
        {'w': tensor([1., 1.]), 'step': 3}
    """
    if _is_torch_path(f):  # See NOTE [Writing PyTorch files]
        _write_path(f, lambda out: _encode_torch(obj, out))  # type: ignore[arg-type]
        return
    if _is_path(f) and os.fspath(f).endswith(".safetensors"):  # type: ignore[arg-type]
        data = _encode_safetensors(obj)
        _write_path(f, lambda out: out.write(data))  # type: ignore[arg-type]
        return
    import json  # imported on use, to keep `import asyncgrad` fast

    enc = _Encoder()
    root = enc.encode(obj, "obj")
    tensors, views = enc.finish()
    header: dict[str, Any] = {"format": "asyncgrad", "version": 1, "root": root}
    if views:  # only then version 2, which an asyncgrad that predates views refuses by name
        header.update(version=FORMAT_VERSION, views=views)
    text = json.dumps(header, allow_nan=True, separators=(",", ":")).encode("utf-8")
    arrays: dict[str, Any] = {STRUCTURE_KEY: text, **tensors}
    if _is_path(f):
        _write_path(f, lambda out: write_npz(out, arrays))  # type: ignore[arg-type]
    else:
        write_npz(f, arrays)  # type: ignore[arg-type]


def load(
    f: FileLike,
    map_location: MapLocation = None,
    *,
    weights_only: bool | None = None,
    max_bytes: int | None = None,
) -> Any:
    """Load what ``ag.save`` saved to ``f`` (a path or a binary file object).

    Args:
        f: the file. A plain ``.npz`` of arrays (no structure entry) or a safetensors file
            written elsewhere loads as a ``{name: Tensor}`` dict. A file ``torch.save`` wrote
            (a state dict, an optimizer's state, containers of tensors) loads without torch
            and without running anything from it (See NOTE [PyTorch files]).
        map_location: where tensors go: ``None`` (the device each was saved from), a device
            (``"cpu"``, ``"cuda:1"``, ``ag.device(...)``) for all, a dict mapping saved devices
            to devices (``{"cuda:0": "cpu"}``), or a function from the saved device's name to
            a device.
        weights_only: accepted for torch's signature, with any value: this loader never runs
            code from a file (PyTorch's pickles are read by an unpickler that knows only
            tensors and containers), so it always behaves as torch's ``weights_only=True``,
            also when ``weights_only=False`` is passed.
        max_bytes: for files from untrusted sources, the most bytes the file may hold and its
            arrays may take once read (a compressed ``.npz`` of 1 MB can inflate to 1 GiB):
            checked before anything is decompressed, against the sizes the archive declares,
            which the reader then holds it to. ``None`` (the default): no limit.

    Raises:
        RuntimeError: the file is not a well-formed asyncgrad, ``.npz``, safetensors or
            PyTorch file (truncated, corrupt, holding pickled objects or arrays no tensor
            holds, a PyTorch pickle naming anything but tensors and containers), naming it
            and what is wrong, with the exception its reader raised (if one did) as its
            ``__cause__``; or a tensor would go to a CUDA device where none is available.
    """
    name = _name_of(f)
    if max_bytes is not None and (type(max_bytes) is not int or max_bytes < 0):
        raise ValueError(f"ag.load: max_bytes must be None or an int >= 0, got {max_bytes!r}")
    limit = -1 if max_bytes is None else max_bytes + 1
    if _is_path(f):
        with open(f, "rb") as fh:  # type: ignore[arg-type]
            data = fh.read(limit)
    else:
        data = f.read(limit)  # type: ignore[union-attr]
    zf = _zip_of(data)
    if max_bytes is not None:
        _check_size(data, zf, max_bytes, name)
    try:
        # Safetensors first: its header length can begin with the bytes "PK" (19,280 and every
        # 65,536 more), and a zip never has "{" where safetensors' header starts.
        if _looks_like_safetensors(data):
            return _decode_safetensors(data, map_location)
        pickled = None if zf is None else _torch_pickle_of(zf)
        if zf is not None and pickled is not None:
            return _decode_torch(zf, len(data), pickled, map_location)
        return _decode_npz(data, zf, map_location)
    except _CorruptError as e:
        raise RuntimeError(f"ag.load: {name} is not a valid asyncgrad file: {e}") from e.__cause__
    except ArrayFileError as e:
        raise RuntimeError(f"ag.load: {name} is not a valid asyncgrad file: {e}") from e.__cause__


# ----------------------------------------------------------------------------- files
def _zip_of(data: bytes) -> zipfile.ZipFile | None:
    """The file as a zip (its directory read once), or None if it is not one (a malformed
    one included: its reader then says what is wrong)."""
    if data[:4] != b"PK\x03\x04":
        return None
    try:
        return open_zip(data)
    except ArrayFileError:
        return None


def _check_size(data: bytes, zf: zipfile.ZipFile | None, max_bytes: int, name: str) -> None:
    """Raise if the file, or a zip's members once decompressed, exceed ``max_bytes``."""
    if len(data) > max_bytes:
        raise RuntimeError(f"ag.load: {name} is larger than max_bytes={max_bytes}")
    if zf is None:
        return
    total = sum(i.file_size for i in zf.infolist())
    if total > max_bytes:
        raise RuntimeError(
            f"ag.load: {name} holds {total} bytes once decompressed, more than "
            f"max_bytes={max_bytes}"
        )


def _is_path(f: Any) -> bool:
    return isinstance(f, str | os.PathLike)


def _name_of(f: Any) -> str:
    if _is_path(f):
        return repr(os.fspath(f))
    name = getattr(f, "name", None)
    return repr(name) if isinstance(name, str) else f"<{type(f).__name__}>"


def _write_path(path: str | os.PathLike[str], write: Callable[[IO[bytes]], Any]) -> None:
    """Write to a temporary file beside ``path``, then move it into place. The file gets the
    permissions ``open(path, "wb")`` would give it: a replaced file's own, else the umask's
    (a temporary file of ``tempfile`` is private, 0600)."""
    import uuid

    path = os.fspath(path)
    tmp = os.path.join(os.path.dirname(path) or ".", f".agsave-{uuid.uuid4().hex}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        if os.path.exists(path):
            os.chmod(tmp, os.stat(path).st_mode & 0o7777)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    try:
        with os.fdopen(fd, "wb") as out:
            write(out)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _looks_like_safetensors(data: bytes) -> bool:
    """A safetensors file: an 8-byte little-endian header length, then a JSON object."""
    return len(data) >= 9 and data[8:9] == b"{"


class _CorruptError(Exception):
    """The file's structure is malformed (the message says how)."""


class _NoCudaError(RuntimeError):
    """A tensor would go to a CUDA device where none is available: not a defect of the file,
    so it passes the readers' handlers as it is."""


# ----------------------------------------------------------------------------- encoding
_PLAIN: Final = (type(None), bool, int, float, str)


class _Encoder:
    """Turns an object into its JSON structure, collecting each distinct tensor's host array."""

    def __init__(self) -> None:
        self.sources: dict[str, Any] = {}  # entry -> the tensor's array, on its device
        self.names: dict[int, str] = {}  # id(tensor) -> its entry
        self.keep: list[Tensor] = []  # keeps ids valid while encoding
        self.active: set[int] = set()  # containers being encoded: a cycle check

    def encode(self, v: Any, where: str) -> Any:
        if type(v) in _PLAIN:
            return v
        if isinstance(v, Tensor):
            return self.tensor(v)
        if isinstance(v, backend.generic):  # a NumPy scalar: its Python value
            return self.encode(v.item(), where)
        if isinstance(v, bool | int | float | str):  # subclasses (IntEnum, ...): the base value
            return v.__index__() if isinstance(v, int) and not isinstance(v, bool) else v
        if isinstance(v, dtypes.dtype):
            return {"type": "dtype", "name": str(v)}
        if isinstance(v, Device):
            return {"type": "device", "name": str(v)}
        if isinstance(v, dict | list | tuple):
            if id(v) in self.active:
                raise ValueError(f"ag.save: {where} contains itself")
            self.active.add(id(v))
            try:
                if isinstance(v, dict):
                    items = [
                        [self.key(k, where), self.encode(x, f"{where}[{k!r}]")]
                        for k, x in v.items()
                    ]
                    kind = "OrderedDict" if isinstance(v, OrderedDict) else "dict"
                    return {"type": kind, "items": items}
                seq = [self.encode(x, f"{where}[{i}]") for i, x in enumerate(v)]
                return seq if isinstance(v, list) else {"type": "tuple", "items": seq}
            finally:
                self.active.discard(id(v))
        raise TypeError(
            f"ag.save: cannot save {where} of type {type(v).__module__}.{type(v).__qualname__}: "
            "only Tensors, dicts, lists, tuples, None, bools, ints, floats, strings, dtypes "
            "and devices are saved"
        )

    def key(self, k: Any, where: str) -> Any:
        if isinstance(k, Tensor | dict | list):
            raise TypeError(
                f"ag.save: cannot save a dict key of type {type(k).__name__} in {where}"
            )
        return self.encode(k, f"a key of {where}")

    def tensor(self, t: Tensor) -> dict[str, Any]:
        name = self.names.get(id(t))
        if name is None:
            name = self.names[id(t)] = f"t{len(self.names)}"
            self.keep.append(t)
            self.sources[name] = t._array
        node = {
            "type": "tensor",
            "data": name,
            "device": str(t.device),
            "requires_grad": t.requires_grad,
        }
        if isinstance(t, Parameter):
            node["class"] = "Parameter"
        return node

    def finish(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The host arrays to write, and the layouts of the tensors stored as views of a
        shared storage (See NOTE [Views in saved files])."""
        arrays: dict[str, Any] = {}
        views: dict[str, Any] = {}
        for group in _sharing_groups(self.sources):
            members = [self.sources[n] for n in group]
            dt = members[0].dtype
            item = dt.itemsize
            spans = [byte_span(a) for a in members]
            lo, hi = min(s[0] for s in spans), max(s[1] for s in spans)
            firsts = [backend.data_ptr(a) for a in members]
            if any(
                a.dtype != dt or (p - lo) % item or any(st % item for st in a.strides)
                for a, p in zip(members, firsts, strict=True)
            ):
                continue  # not one array's elements: each is saved on its own
            storage = f"s{len(arrays)}"  # only storages are in arrays yet
            head = members[firsts.index(min(firsts))]  # starts at lo, unless strides < 0
            arrays[storage] = _host(span_of(head, lo, (hi - lo) // item))
            for n, a, p in zip(group, members, firsts, strict=True):
                views[n] = {
                    "storage": storage,
                    "offset": (p - lo) // item,
                    "size": list(a.shape),
                    "stride": [st // item for st in a.strides],
                }
        for n, a in self.sources.items():
            if n not in views:
                arrays[n] = _host(a)
        return arrays, views


def _host(a: Any) -> Any:
    return a if type(a) is backend.ndarray else backend.to_device(a, CPU)


def _sharing_groups(sources: dict[str, Any]) -> list[list[str]]:
    """The entries whose arrays share memory with another's, grouped: arrays on one device
    whose byte ranges overlap, directly or through others."""
    spans = sorted(
        (str(backend.device_of(a)), *byte_span(a), n) for n, a in sources.items() if a.size
    )
    groups: list[list[str]] = []
    current: list[str] = []
    where, reach = "", 0
    for dev, lo, hi, n in spans:
        if current and dev == where and lo < reach:
            current.append(n)
            reach = max(reach, hi)
            continue
        if len(current) > 1:
            groups.append(current)
        current, where, reach = [n], dev, hi
    if len(current) > 1:
        groups.append(current)
    return groups


def _encode_safetensors(obj: Any) -> bytes:
    if not isinstance(obj, dict) or not all(
        isinstance(k, str) and isinstance(v, Tensor) for k, v in obj.items()
    ):
        raise TypeError(
            "ag.save: a .safetensors file holds a flat dict of str -> Tensor (a state dict), "
            f"got {_describe(obj)}; save other objects (optimizer state, nested dicts) to a "
            ".npz path"
        )
    if any(k == STRUCTURE_KEY for k in obj):
        raise ValueError(f"ag.save: {STRUCTURE_KEY!r} is reserved as a tensor name")
    import json

    arrays = {}
    info = []
    for k, t in obj.items():
        arrays[k] = _host(t._array)
        meta: dict[str, Any] = {"device": str(t.device), "requires_grad": t.requires_grad}
        if isinstance(t, Parameter):
            meta["class"] = "Parameter"
        info.append([k, meta])
    header = {"format": "asyncgrad", "version": FORMAT_VERSION, "tensors": info}
    return write_safetensors(arrays, {STRUCTURE_KEY: json.dumps(header)})


def _describe(obj: Any) -> str:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, str):
                return f"a dict with a key of type {type(k).__name__}"
            if not isinstance(v, Tensor):
                return f"a dict whose value at {k!r} is of type {type(v).__name__}"
    return f"an object of type {type(obj).__name__}"


# ----------------------------------------------------------------------------- decoding
class _Decoder:
    def __init__(
        self, arrays: dict[str, Any], views: dict[str, Any], map_location: MapLocation
    ) -> None:
        self.arrays = arrays
        self.views = views
        self.storages = _Storages(map_location)
        self.map_location = map_location
        self.tensors: dict[str, Tensor] = {}

    def decode(self, node: Any) -> Any:
        if node is None or type(node) in (bool, int, float, str):
            return node
        if type(node) is list:
            return [self.decode(x) for x in node]
        if type(node) is not dict:
            raise _CorruptError(f"unexpected {type(node).__name__} in the structure")
        kind = node.get("type")
        if type(kind) is str and kind in _NODE_FIELDS:
            _known_fields(node, _NODE_FIELDS[kind], f"a {kind} node")
        if kind == "tensor":
            return self.tensor(node)
        if kind in ("dict", "OrderedDict"):
            items = self.items(node)
            pairs = []
            for pair in items:
                if type(pair) is not list or len(pair) != 2:
                    raise _CorruptError("a dict item is not a [key, value] pair")
                k = self.decode(pair[0])
                try:
                    hash(k)
                except TypeError:
                    raise _CorruptError("a dict key is not hashable") from None
                pairs.append((k, self.decode(pair[1])))
            return OrderedDict(pairs) if kind == "OrderedDict" else dict(pairs)
        if kind == "tuple":
            return tuple(self.decode(x) for x in self.items(node))
        if kind == "dtype":
            try:
                return dtypes.to_dtype(_str(node, "name"))
            except TypeError:
                raise _CorruptError(f"unknown dtype {node.get('name')!r}") from None
        if kind == "device":
            return _device(_str(node, "name"))
        raise _CorruptError(f"unknown node type {kind!r} in the structure")

    @staticmethod
    def items(node: dict[str, Any]) -> list[Any]:
        items = node.get("items")
        if type(items) is not list:
            raise _CorruptError(f"a {node.get('type')} node has no list of items")
        return items

    def tensor(self, node: dict[str, Any]) -> Tensor:
        name = _str(node, "data")
        t = self.tensors.get(name)
        if t is not None:
            return t
        layout = self.views.get(name)
        if layout is not None:
            _known_fields(layout, ("storage", "offset", "size", "stride"), f"the view {name!r}")
            key = layout.get("storage")
            storage = self.arrays.get(key) if type(key) is str else None
            if storage is None or storage.ndim != 1:
                raise _CorruptError(f"the view {name!r} names no 1-d storage array")
            t = self.storages.tensor(
                key, storage, layout.get("offset"), layout.get("size"), layout.get("stride"), node
            )
        else:
            arr = self.arrays.get(name)
            if arr is None:
                raise _CorruptError(f"the structure names a missing array {name!r}")
            t = _make_tensor(arr, node, self.map_location)
        self.tensors[name] = t
        return t


class _Storages:
    """Tensors made as views of a file's storages, each storage moved to a device once: views
    saved with their base share its memory after loading, on any device."""

    def __init__(self, map_location: MapLocation) -> None:
        self.map_location = map_location
        self.placed: dict[tuple[Hashable, str], Any] = {}  # (storage, device) -> its array

    def tensor(
        self,
        key: Hashable,
        storage: Any,
        offset: Any,
        size: Any,
        stride: Any,
        meta: dict[str, Any],
    ) -> Tensor:
        dev = _target(_str(meta, "device") if "device" in meta else "cpu", self.map_location)
        placed = self.placed.get((key, str(dev)))
        if placed is None:
            placed = storage if dev is CPU else backend.to_device(storage, dev)
            self.placed[key, str(dev)] = placed
        return _wrap_tensor(strided_view(placed, offset, size, stride), meta)


# The fields of each node of an asyncgrad structure, of its header and of a safetensors file's
# metadata: a reader of a version knows every field of it, so any other is damage (a field
# whose name was corrupted would otherwise load as if absent: requires_grad as False).
_NODE_FIELDS: Final[dict[Any, tuple[str, ...]]] = {
    "tensor": ("type", "data", "device", "requires_grad", "class"),
    "dict": ("type", "items"),
    "OrderedDict": ("type", "items"),
    "tuple": ("type", "items"),
    "dtype": ("type", "name"),
    "device": ("type", "name"),
}
_TENSOR_META_FIELDS: Final = ("device", "requires_grad", "class")


def _known_fields(node: dict[str, Any], known: tuple[str, ...], what: str) -> None:
    for field in node:
        if field not in known:
            raise _CorruptError(f"{what} has the unknown field {field!r:.40}")


def _str(node: dict[str, Any], field: str) -> str:
    v = node.get(field)
    if type(v) is not str:
        raise _CorruptError(f"a {node.get('type')} node has no string {field!r}")
    return v


def _device(name: str) -> Device:
    try:
        return Device(name)
    except (RuntimeError, TypeError):
        raise _CorruptError(f"invalid device {name!r}") from None


def _target(saved: str, map_location: MapLocation) -> Device:
    """Where a tensor saved from device ``saved`` goes."""
    if map_location is None:
        dev = _device(saved)
    elif isinstance(map_location, dict):
        table = {str(Device(k)): v for k, v in map_location.items()}
        dev = Device(table.get(str(_device(saved)), saved))
    elif isinstance(map_location, str | Device):
        dev = Device(map_location)
    elif callable(map_location):
        dev = Device(map_location(saved))
    else:
        raise TypeError(
            "map_location must be None, a device, a dict of devices or a function, "
            f"got {type(map_location).__name__}"
        )
    if dev.type == "cuda" and not cuda.is_available():
        raise _NoCudaError(
            "Attempting to deserialize object on a CUDA device but ag.cuda.is_available() is "
            "False. If you are running on a CPU-only machine, please use ag.load with "
            "map_location='cpu' to map your tensors to the CPU."
        )
    return dev


def _make_tensor(arr: Any, meta: dict[str, Any], map_location: MapLocation) -> Tensor:
    dev = _target(_str(meta, "device") if "device" in meta else "cpu", map_location)
    if dev is not CPU:
        arr = backend.to_device(arr, dev)
    return _wrap_tensor(arr, meta)


def _wrap_tensor(arr: Any, meta: dict[str, Any]) -> Tensor:
    rg = meta.get("requires_grad", False)
    if type(rg) is not bool:
        raise _CorruptError("a tensor's requires_grad is not a bool")
    if rg and not dtypes.is_floating(arr.dtype):
        raise _CorruptError(f"a tensor of dtype {arr.dtype} requires grad")
    if meta.get("class", "Parameter") != "Parameter":
        raise _CorruptError(f"a tensor's class {meta['class']!r:.40} is not one this reader knows")
    if meta.get("class") == "Parameter":
        return Parameter(arr, requires_grad=rg)
    t = Tensor._wrap(arr)
    if rg:
        t.requires_grad_(True)
    return t


def _decode_npz(data: bytes, zf: zipfile.ZipFile | None, map_location: MapLocation) -> Any:
    arrays = read_npz(data, zf)
    raw = arrays.pop(STRUCTURE_KEY, None)
    if raw is None:  # a plain .npz of arrays, written elsewhere
        return {k: _make_tensor(a, {}, map_location) for k, a in arrays.items()}
    if raw.ndim != 1 or str(raw.dtype) != "uint8":
        raise _CorruptError(f"the {STRUCTURE_KEY} entry is not a byte string")
    header = _parse_json(raw.tobytes())
    if type(header) is not dict or header.get("format") != "asyncgrad" or "root" not in header:
        raise _CorruptError(f"the {STRUCTURE_KEY} entry is not an asyncgrad structure")
    _check_version(header)
    _known_fields(header, ("format", "version", "root", "views"), "its header")
    views = header.get("views", {})
    if type(views) is not dict or not all(type(v) is dict for v in views.values()):
        raise _CorruptError("its views are not a table of layouts")
    try:
        return _Decoder(arrays, views, map_location).decode(header["root"])
    except RecursionError:
        raise _CorruptError("the structure is nested too deeply") from None


def _check_version(header: dict[str, Any]) -> None:
    if header.get("version") not in (1, FORMAT_VERSION):
        raise _CorruptError(
            f"format version {header.get('version')!r} (this asyncgrad reads 1 to {FORMAT_VERSION})"
        )


def _decode_safetensors(data: bytes, map_location: MapLocation) -> Any:
    arrays, metadata = read_safetensors(data)
    raw = metadata.get(STRUCTURE_KEY)
    if raw is None:  # written elsewhere: every tensor on the CPU, in the file's order
        return {k: _make_tensor(a, {}, map_location) for k, a in arrays.items()}
    header = _parse_json(raw.encode("utf-8"))
    info = header.get("tensors") if type(header) is dict else None
    if type(info) is not list or header.get("format") != "asyncgrad":
        raise _CorruptError(f"the {STRUCTURE_KEY} metadata is not an asyncgrad header")
    _check_version(header)
    _known_fields(header, ("format", "version", "tensors"), "its header")
    out = {}
    for item in info:
        if type(item) is not list or len(item) != 2 or type(item[1]) is not dict:
            raise _CorruptError(f"the {STRUCTURE_KEY} metadata is not an asyncgrad header")
        k, meta = item
        if type(k) is not str:
            raise _CorruptError(
                f"the {STRUCTURE_KEY} metadata names a tensor by a {type(k).__name__}"
            )
        if k not in arrays:
            raise _CorruptError(f"the metadata names a missing tensor {k!r}")
        if k in out:
            raise _CorruptError(f"the metadata names the tensor {k!r} twice")
        _known_fields(meta, _TENSOR_META_FIELDS, f"the metadata of {k!r}")
        out[k] = _make_tensor(arrays[k], meta, map_location)
    for k, a in arrays.items():
        if k not in out:
            out[k] = _make_tensor(a, {}, map_location)
    return out


# ----------------------------------------------------------------------------- PyTorch files
# NOTE [PyTorch files]
# ``torch.save`` writes a zip whose ``<name>/data.pkl`` is a pickle of the object in which each
# tensor is a call ``torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)`` and
# each storage a persistent id ``("storage", torch.<Type>Storage, key, location, numel)``
# naming the member ``<name>/data/<key>`` that holds its bytes. Unpickling it with pickle's own
# loader would run whatever the file names; here the unpickler resolves only the names a state
# dict or an optimizer's state uses (the storage types, the two rebuild functions,
# ``collections.OrderedDict``) to asyncgrad's own stand-ins, and refuses every other name with
# an error naming the file and the object: no code from the file ever runs, with or without
# torch installed. Tensors are views of their storage as the file lays them out, so views
# saved with their base share memory after loading, on any device: each storage is read once
# and moved to each device once (See NOTE [Views in saved files]).
# What torch.save never writes is refused as damage, not loaded as something else: a storage
# whose bytes disagree with a reference's numel, dtype or device, a tensor's backward hooks
# other than an empty dict, metadata other than the conj and neg bits (applied to a copy of
# the storage, which the views with those bits share), a BUILD that changes a tensor after it
# was built. Before the unpickler runs, _check_pickle holds the pickle's declared lengths and
# memo indices to its bytes (See NOTE [Sizes from a file] in asyncgrad/backend/arrayio.py).
_TORCH_STORAGES: Final = {
    "FloatStorage": "float32",
    "DoubleStorage": "float64",
    "HalfStorage": "float16",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
    "ComplexFloatStorage": "complex64",
    "ComplexDoubleStorage": "complex128",
}


_TORCH_DTYPES: Final = frozenset(
    {
        "float16",
        "float32",
        "float64",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "bool",
        "complex64",
        "complex128",
    }
)


def _torch_device(*args: Any) -> Device:
    """``torch.device(type[, index])`` in a file: the device, from plain arguments only."""
    if (
        not 1 <= len(args) <= 2
        or type(args[0]) is not str
        or any(type(a) is not int for a in args[1:])
    ):
        raise _CorruptError(f"a device's arguments {args!r:.80} are malformed")
    return Device(args[0] if len(args) == 1 else f"{args[0]}:{args[1]}")


def _torch_size(dims: Any) -> Any:
    if type(dims) is not tuple or any(type(d) is not int or d < 0 for d in dims):
        raise _CorruptError(f"a Size's arguments {dims!r:.80} are malformed")
    from ._tensor import Size

    return Size(dims)


class _StorageType(NamedTuple):
    """What a file's ``torch.<Type>Storage`` resolves to: the dtype of its bytes. A tuple,
    so that a pickle's BUILD cannot change it."""

    name: str
    dtype: str


def _torch_pickle_of(zf: zipfile.ZipFile) -> str | None:
    """The name of the pickle member of a PyTorch zip file (``<name>/data.pkl``), or None."""
    found = [n for n in zf.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
    return found[0] if len(found) == 1 else None


def _decode_torch(
    zf: zipfile.ZipFile, file_bytes: int, member: str, map_location: MapLocation
) -> Any:
    import pickle

    from .backend.arrayio import torch_storage

    prefix = member.rsplit("/", 1)[0]
    # torch.save writes 0 for every CRC when told not to compute them
    # (torch.serialization.set_crc32_options(False)), and torch.load never checks them; where
    # a file has CRCs, each is checked (test_a_torch_file_written_without_crcs_loads).
    check_crc = any(i.CRC for i in zf.infolist())

    def read(name: str) -> Any:
        try:
            info = zf.getinfo(name)
        except KeyError:
            return None
        return read_member(zf, info, file_bytes, check_crc=check_crc)

    raw_order = read(f"{prefix}/byteorder")
    # Without the member: written before it existed, on little-endian machines.
    byteorder = "little" if raw_order is None else raw_order.tobytes().decode("latin-1").strip()
    if byteorder not in ("little", "big"):
        raise _CorruptError(f"its byte order is {byteorder!r}")
    storages: dict[str, tuple[str, Any, str]] = {}
    placed = _Storages(map_location)
    made: list[tuple[Tensor, tuple[Any, ...]]] = []  # each tensor built, with its state then
    with_bits: dict[Hashable, Any] = {}  # (storage, bits) -> the storage with them applied

    class Unpickler(pickle.Unpickler):
        def find_class(self, module: str, attr: str) -> Any:
            if module == "torch" and attr in _TORCH_STORAGES:
                return _StorageType(attr, _TORCH_STORAGES[attr])
            if (module, attr) == ("collections", "OrderedDict"):
                return OrderedDict
            if (module, attr) == ("torch._utils", "_rebuild_tensor_v2"):
                return rebuild_tensor
            if (module, attr) == ("torch._utils", "_rebuild_parameter"):
                return rebuild_parameter
            # What torch writes for uint16/32/64 tensors, and plain values of a state dict
            # (See NOTE [Writing PyTorch files]).
            if (module, attr) == ("torch.storage", "UntypedStorage"):
                return _StorageType(attr, "uint8")
            if (module, attr) == ("torch._utils", "_rebuild_tensor_v3"):
                return rebuild_tensor_v3
            if module == "torch" and attr in _TORCH_DTYPES:
                return dtypes.to_dtype(attr)
            if (module, attr) == ("torch", "device"):
                return _torch_device
            if (module, attr) == ("torch", "Size"):
                return _torch_size
            raise _CorruptError(
                f"it names {module}.{attr}, which a file of tensors and containers does not "
                "hold; it was not loaded, and nothing from the file ran"
            )

        def persistent_load(self, pid: Any) -> Any:
            if not (
                type(pid) is tuple
                and len(pid) == 5
                and pid[0] == "storage"
                and type(pid[1]) is _StorageType
                and type(pid[2]) is str
                and type(pid[3]) is str
                and type(pid[4]) is int
            ):
                raise _CorruptError(
                    f"it holds an object reference {pid!r:.80} that is not a storage"
                )
            _, kind, key, location, numel = pid
            if key not in storages:
                raw = read(f"{prefix}/data/{key}")
                if raw is None:
                    raise _CorruptError(f"its storage {key!r} is missing")
                storages[key] = (key, torch_storage(raw, kind.dtype, byteorder), location)
            entry = storages[key]
            held = entry[1]
            if held.dtype != kind.dtype or held.shape[0] != numel or entry[2] != location:
                raise _CorruptError(
                    f"its storage {key!r} holds {held.shape[0]} {held.dtype} on {entry[2]}, and "
                    f"a reference to it says {numel} {kind.dtype} on {location}"
                )
            return entry

    def rebuild_tensor(
        storage: Any,
        offset: Any,
        size: Any,
        stride: Any,
        requires_grad: Any,
        backward_hooks: Any,
        metadata: Any = None,
    ) -> Tensor:
        ours = type(storage) is tuple and len(storage) == 3 and type(storage[0]) is str
        entry = storages.get(storage[0]) if ours else None
        if (
            entry is None
            or entry is not storage
            or type(requires_grad) is not bool
            or not _no_hooks(backward_hooks)
        ):
            raise _CorruptError("a tensor's arguments are malformed")
        key, array, location = entry
        bits = _bits_of(metadata)
        where: Hashable = key
        if bits:  # a view of the storage with the bits applied, as one storage of its own
            where = (key, bits)
            if where not in with_bits:
                with_bits[where] = _apply_bits(array, bits)
            array = with_bits[where]
        meta = {"requires_grad": requires_grad, "device": location}
        return built(placed.tensor(where, array, offset, size, stride, meta))

    typed: dict[tuple[str, str], tuple[str, Any, str]] = {}  # (key, dtype) -> typed entry

    def rebuild_tensor_v3(
        storage: Any,
        offset: Any,
        size: Any,
        stride: Any,
        requires_grad: Any,
        backward_hooks: Any,
        dtype: Any,
        metadata: Any = None,
    ) -> Tensor:
        ours = type(storage) is tuple and len(storage) == 3 and type(storage[0]) is str
        entry = storages.get(storage[0]) if ours else None
        if entry is None or entry is not storage or not isinstance(dtype, dtypes.dtype):
            raise _CorruptError("a tensor's arguments are malformed")
        key = (entry[0], str(dtype))
        if key not in typed:  # the untyped storage's bytes read as dtype, once per dtype
            try:
                array = torch_storage(entry[1], str(dtype), byteorder)
            except ArrayFileError as e:
                raise _CorruptError(f"its storage {entry[0]!r}: {e}") from None
            typed[key] = (f"{entry[0]}:{dtype}", array, entry[2])
            storages[typed[key][0]] = typed[key]
        return rebuild_tensor(
            typed[key], offset, size, stride, requires_grad, backward_hooks, metadata
        )

    def rebuild_parameter(data: Any, requires_grad: Any, backward_hooks: Any) -> Tensor:
        if (
            not isinstance(data, Tensor)
            or type(requires_grad) is not bool
            or not _no_hooks(backward_hooks)
        ):
            raise _CorruptError("a parameter's arguments are malformed")
        return built(Parameter(data._array, requires_grad=requires_grad))

    def built(t: Tensor) -> Tensor:
        made.append((t, _state_of(t)))
        return t

    pickled = read(member).tobytes()
    _check_pickle(pickled)
    try:
        obj = Unpickler(io.BytesIO(pickled)).load()
    except (_CorruptError, ArrayFileError, _NoCudaError):
        raise
    except RecursionError:
        raise _CorruptError("its pickle is nested too deeply") from None
    except Exception as e:  # the unpickler's own, or what BUILD's setattr on a tensor raised
        raise _CorruptError(f"its pickle is malformed ({type(e).__name__}: {e})") from e
    # torch.save gives a tensor its whole state in its arguments: a BUILD that changed one
    # afterwards (its array, its requires_grad) is no file torch wrote.
    for t, state in made:
        if any(a is not b for a, b in zip(_state_of(t), state, strict=True)):
            raise _CorruptError("its pickle changes a tensor after building it")
    return obj


def _no_hooks(hooks: Any) -> bool:
    """Whether ``hooks`` is what torch.save writes for a tensor's backward hooks: an empty
    dict (See Note [Don't serialize hooks] in torch/_utils.py)."""
    return type(hooks) in (dict, OrderedDict) and not hooks


_TORCH_BITS: Final = ("conj", "neg")


def _bits_of(metadata: Any) -> tuple[str, ...]:
    """The bits torch keeps in a tensor's metadata (``_rebuild_tensor_v2``'s last argument),
    of those this reader knows: a lazily conjugated or negated view (``x.conj()``,
    ``x.conj().imag``) is saved as its base's storage and the bit."""
    if metadata is None:
        return ()
    if type(metadata) not in (dict, OrderedDict) or not all(
        k in _TORCH_BITS and type(v) is bool for k, v in metadata.items()
    ):
        raise _CorruptError(f"a tensor's metadata {metadata!r:.80} is not one this reader knows")
    return tuple(k for k in _TORCH_BITS if metadata.get(k))


def _apply_bits(storage: Any, bits: tuple[str, ...]) -> Any:
    """A copy of ``storage`` with ``bits`` applied to its values. Applied to the storage, not
    to each view (an expanded one may span far more elements than the file holds), so the
    views with the same bits share the copy, as they share the storage in torch."""
    if "conj" in bits:
        storage = storage.conj()
    if "neg" in bits:
        storage = -storage
    return storage


_TENSOR_SLOTS: Final = tuple(s for s in Tensor.__slots__ if s != "__weakref__")


def _state_of(t: Tensor) -> tuple[Any, ...]:
    return tuple(getattr(t, s, None) for s in _TENSOR_SLOTS)


def _check_pickle(pickled: bytes) -> None:
    """Refuse a pickle that declares more than it holds (See NOTE [Sizes from a file]):
    CPython's unpickler allocates a BINBYTES8's or BYTEARRAY8's declared length, and a memo
    twice as long as the largest index put, before reading on. ``pickletools`` reads each
    argument only as far as the bytes go, and a pickler puts memo indices in order, so none
    exceeds the count of opcodes before it."""
    import pickletools

    try:
        for n, (op, arg, _) in enumerate(pickletools.genops(pickled)):
            is_put = op.name in ("PUT", "BINPUT", "LONG_BINPUT")
            if is_put and not (isinstance(arg, int) and 0 <= arg <= n):
                raise _CorruptError(f"its pickle puts memo index {arg} after {n} opcodes")
    except _CorruptError:
        raise
    except Exception as e:  # pickletools raises ValueError, and decoding errors of arguments
        raise _CorruptError(f"its pickle is malformed ({type(e).__name__}: {e})") from e


def _parse_json(raw: bytes) -> Any:
    import json

    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise _CorruptError(f"its structure is not valid JSON ({e})") from None


# ----------------------------------------------------------------------------- writing them
# NOTE [Writing PyTorch files]
# ``ag.save(obj, "x.pt")`` (or ``.pth``) writes the zip ``torch.save`` writes, which
# ``torch.load(path, weights_only=True)`` reads: ``archive/data.pkl``, a protocol-2 pickle of
# the object, and one member ``archive/data/<key>`` per storage, with ``byteorder``, ``version``
# and torch's format records. The pickle is written opcode by opcode (no pickler, so nothing of
# asyncgrad's is ever named in it): dicts, OrderedDicts, lists, tuples, None, bools, ints,
# floats and strings as themselves; dtypes as ``torch.<name>``; devices as ``torch.device``;
# ``ag.Size`` as ``torch.Size``; a tensor as torch's ``_rebuild_tensor_v2(storage, offset,
# size, stride, requires_grad, OrderedDict())`` over a ``torch.<Type>Storage`` (uint16, uint32
# and uint64, which have no typed storage, as ``_rebuild_tensor_v3`` over an
# ``UntypedStorage`` with the dtype, as torch writes them); a Parameter as
# ``_rebuild_parameter``. Tensors sharing memory are views of one storage, as in the npz format
# (See NOTE [Views in saved files]); a tensor that appears twice is pickled once and memoised,
# so it loads as one tensor. A view with a negative stride, which torch cannot hold, is stored
# as a copy. Tensors keep their devices ("cuda:0"): load a CUDA tensor's file with
# ``map_location`` where torch has no CUDA.
TORCH_SUFFIXES: Final = (".pt", ".pth")
_TORCH_STORAGE_OF: Final = {v: k for k, v in _TORCH_STORAGES.items()}


def _is_torch_path(f: Any) -> bool:
    return _is_path(f) and os.fspath(f).lower().endswith(TORCH_SUFFIXES)


class _TorchPickle:
    """A protocol-2 pickle of an object for torch's loader (See NOTE [Writing PyTorch
    files])."""

    def __init__(self, layouts: dict[int, tuple[str, int, list[int], list[int], Any]]) -> None:
        self.layouts = layouts  # id(tensor) -> (storage key, offset, size, stride, storage)
        self.out = bytearray(b"\x80\x02")
        self.memo: dict[int, int] = {}
        self.active: set[int] = set()

    def finish(self) -> bytes:
        self.out += b"."
        return bytes(self.out)

    def global_(self, module: str, name: str) -> None:
        self.out += f"c{module}\n{name}\n".encode("ascii")

    def value(self, v: Any, where: str) -> None:
        import struct

        out = self.out
        if v is None:
            out += b"N"
        elif v is True or v is False:
            out += b"\x88" if v else b"\x89"
        elif isinstance(v, Tensor):
            self.tensor(v)
        elif isinstance(v, backend.generic):
            self.value(v.item(), where)
        elif isinstance(v, int):
            v = v.__index__()
            if -(2**31) <= v < 2**31:
                out += b"J" + struct.pack("<i", v)
            else:
                raw = v.to_bytes((v.bit_length() + 8) // 8, "little", signed=True)
                out += b"\x8a" + bytes([len(raw)]) + raw
        elif isinstance(v, float):
            out += b"G" + struct.pack(">d", v)
        elif isinstance(v, str):
            raw = str(v).encode("utf-8", "surrogatepass")
            out += b"X" + struct.pack("<I", len(raw)) + raw
        elif isinstance(v, dtypes.dtype):
            self.global_("torch", "bool" if v == dtypes.bool_ else str(v))
        elif isinstance(v, Device):
            self.global_("torch", "device")
            self.value((str(v),), where)
            out += b"R"
        elif isinstance(v, dict | list | tuple):
            if id(v) in self.active:
                raise ValueError(f"ag.save: {where} contains itself")
            self.active.add(id(v))
            try:
                self.container(v, where)
            finally:
                self.active.discard(id(v))
        else:
            raise TypeError(
                f"ag.save: cannot save {where} of type "
                f"{type(v).__module__}.{type(v).__qualname__}: only Tensors, dicts, lists, "
                "tuples, None, bools, ints, floats, strings, dtypes and devices are saved"
            )

    def container(self, v: Any, where: str) -> None:
        from ._tensor import Size

        out = self.out
        if isinstance(v, Size):
            self.global_("torch", "Size")
            self.value(tuple(int(d) for d in v), where)
            out += b"\x85R"  # TUPLE1, REDUCE
        elif isinstance(v, tuple):
            out += b"("
            for i, x in enumerate(v):
                self.value(x, f"{where}[{i}]")
            out += b"t"
        elif isinstance(v, list):
            out += b"]("
            for i, x in enumerate(v):
                self.value(x, f"{where}[{i}]")
            out += b"e"
        else:
            if isinstance(v, OrderedDict):
                self.global_("collections", "OrderedDict")
                out += b")R"
            else:
                out += b"}"
            out += b"("
            for k, x in v.items():
                if isinstance(k, Tensor | dict | list):
                    raise TypeError(
                        f"ag.save: cannot save a dict key of type {type(k).__name__} in {where}"
                    )
                self.value(k, f"a key of {where}")
                self.value(x, f"{where}[{k!r}]")
            out += b"u"

    def tensor(self, t: Tensor) -> None:
        import struct

        out = self.out
        seen = self.memo.get(id(t))
        if seen is not None:
            out += b"j" + struct.pack("<I", seen)  # LONG_BINGET
            return
        if isinstance(t, Parameter):
            self.global_("torch._utils", "_rebuild_parameter")
            out += b"("
            self.rebuild(t, requires_grad=False)
            self.value(t.requires_grad, "")
            self.global_("collections", "OrderedDict")
            out += b")RtR"
        else:
            self.rebuild(t, requires_grad=t.requires_grad)
        self.memo[id(t)] = len(self.memo)
        out += b"r" + struct.pack("<I", self.memo[id(t)])  # LONG_BINPUT

    def rebuild(self, t: Tensor, requires_grad: bool) -> None:
        key, offset, size, stride, storage = self.layouts[id(t)]
        dt = storage.dtype
        typed = _TORCH_STORAGE_OF.get(str(dt))
        out = self.out
        self.global_("torch._utils", "_rebuild_tensor_v2" if typed else "_rebuild_tensor_v3")
        out += b"(("
        self.value("storage", "")
        if typed:
            self.global_("torch", typed)
        else:
            self.global_("torch.storage", "UntypedStorage")
        self.value(key, "")
        self.value(str(t.device), "")
        self.value(int(storage.size if typed else storage.size * dt.itemsize), "")
        out += b"tQ"  # TUPLE, BINPERSID
        self.value(offset, "")
        self.value(tuple(size), "")
        self.value(tuple(stride), "")
        self.value(requires_grad, "")
        self.global_("collections", "OrderedDict")
        out += b")R"
        if not typed:
            self.value(dt, "")
        out += b"tR"


def _torch_layouts(
    obj: Any,
) -> tuple[dict[int, tuple[str, int, list[int], list[int], Any]], dict[str, Any], list[Any]]:
    """Each tensor's storage and layout in it, and the storages' host arrays by key."""
    enc = _Encoder()
    enc.encode(obj, "obj")  # collects the tensors (and refuses what cannot be saved)
    arrays, views = enc.finish()
    keys: dict[str, str] = {}
    storages: dict[str, Any] = {}

    def key_of(entry: str) -> str:
        if entry not in keys:
            keys[entry] = str(len(keys))
        return keys[entry]

    layouts: dict[int, tuple[str, int, list[int], list[int], Any]] = {}
    for t in enc.keep:
        name = enc.names[id(t)]
        view = views.get(name)
        if view is not None and all(s >= 0 for s in view["stride"]):
            key = key_of(view["storage"])
            storages[key] = arrays[view["storage"]]
            layouts[id(t)] = (key, view["offset"], view["size"], view["stride"], storages[key])
            continue
        a = _host(t._array) if view is None else _host(t._array).copy()
        flat = a.reshape(-1) if a.flags.c_contiguous else a.copy().reshape(-1)
        key = key_of(name)
        storages[key] = flat
        contiguous, step = [], 1
        for n in reversed(a.shape):
            contiguous.append(step)
            step *= max(n, 1)
        layouts[id(t)] = (key, 0, list(a.shape), contiguous[::-1], flat)
    return layouts, storages, enc.keep


_STORAGE_ALIGNMENT: Final = 64  # torch's: each storage's bytes start at a multiple of it


def _aligned(zf: zipfile.ZipFile, name: str) -> zipfile.ZipInfo:
    """A member whose data will start at a multiple of 64 bytes, padded as torch's writer does
    with an extra field in its local header (so ``torch.load(..., mmap=True)`` maps it)."""
    import struct

    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    header_end = zf.start_dir + 30 + len(name.encode("utf-8")) + 4
    pad = -header_end % _STORAGE_ALIGNMENT
    info.extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
    return info


def _encode_torch(obj: Any, out: IO[bytes]) -> None:
    import sys

    layouts, storages, keep = _torch_layouts(obj)
    p = _TorchPickle(layouts)
    p.value(obj, "obj")
    pickled = p.finish()
    del keep
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("archive/data.pkl", pickled)
        zf.writestr("archive/.format_version", "1")
        zf.writestr("archive/.storage_alignment", "64")
        zf.writestr("archive/byteorder", sys.byteorder)
        for key, a in storages.items():
            zf.writestr(_aligned(zf, f"archive/data/{key}"), a.tobytes())
        zf.writestr("archive/version", "3\n")
