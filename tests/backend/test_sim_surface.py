"""The simulator offers CuPy's API and nothing else (NOTE [CuPy's arguments only] in
asyncgrad/backend/sim.py): an argument, function or method CuPy lacks fails on it as on a GPU.

The first tests check that behaviour on the simulator alone. The others compare the simulator's
surface with the installed CuPy (``cupy-cuda13x``, which imports without a GPU; they skip without
it): every name the simulator offers must exist in CuPy, and every callable must have CuPy's
parameters (names, kinds, defaults). The names come from the simulator itself (its ``__all__``,
its function and ufunc tables, ``ndarray``'s members, the ``cuda``, ``runtime``, ``random`` and
``lib`` objects), so a name added there is checked without a change here.
"""

from __future__ import annotations

import importlib.util
import inspect
import operator
import re
from collections.abc import Callable, Iterator
from typing import Any, Final

import numpy as np
import pytest

from asyncgrad.backend import sim

try:
    import cupy
    import cupyx
    import cupyx.scipy.special
except ImportError as exc:
    cupy = cupyx = None
    NO_CUPY = (
        "CuPy is not installed (CI installs cupy-cuda13x for this check)"
        if exc.name == "cupy"
        else f"CuPy is installed but could not be imported ({type(exc).__name__}: {exc})"
    )
else:
    NO_CUPY = ""


@pytest.fixture(autouse=True)
def one_device() -> Iterator[None]:
    settings = sim._settings()
    before = settings.devices
    sim.configure(devices=max(before, 1))
    try:
        yield
        sim.cuda.Device(0).synchronize()
    finally:
        sim.configure(devices=before)


# ----------------------------------------------------------------------------- behaviour
@pytest.mark.parametrize("keyword", ["where", "order", "subok", "signature"])
def test_a_ufunc_takes_out_dtype_and_casting_only(keyword: str) -> None:
    x = sim.arange(4, dtype=np.float64)
    out = sim.empty(4)
    assert sim.add(x, 1, out=out, dtype=np.float64, casting="same_kind") is out
    np.testing.assert_array_equal(out.get(), [1.0, 2.0, 3.0, 4.0])
    value = True if keyword == "where" else None
    with pytest.raises(TypeError, match=f"Wrong arguments .*'{keyword}'"):
        sim.add(x, 1, **{keyword: x > 1 if keyword == "where" else value})
    with pytest.raises(TypeError, match=f"Wrong arguments .*'{keyword}'"):
        np.exp(x, **{keyword: value})  # through NumPy's dispatch


def test_ufunc_methods_are_cupys() -> None:
    x = sim.asarray(np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(np.add.reduce(x, axis=1).get(), [3.0, 12.0])
    np.testing.assert_array_equal(sim.multiply.accumulate(x, 1).get()[1], [3.0, 12.0, 60.0])
    with pytest.raises(NotImplementedError, match=r"maximum\.reduce"):
        np.maximum.reduce(x)
    with pytest.raises(NotImplementedError, match=r"exp\.accumulate"):
        sim.exp.accumulate(x)
    with pytest.raises(NotImplementedError, match=r"power\.at"):
        np.power.at(x, 0, 2)
    with pytest.raises(TypeError, match="initial"):
        np.add.reduce(x, initial=1.0)
    with pytest.raises(TypeError, match="where"):
        sim.add.reduce(x, where=x > 0)
    np.maximum.at(x, (0, 0), 9.0)
    assert x[0, 0].item() == 9.0


def test_a_function_cupy_lacks_is_missing() -> None:
    x = sim.arange(4, dtype=np.float64)
    with pytest.raises(
        TypeError, match=r"no implementation found for 'numpy\.histogram_bin_edges'"
    ):
        np.histogram_bin_edges(x)
    for name in ("histogram_bin_edges", "insert", "errstate", "fft"):
        with pytest.raises(AttributeError, match=f"has no attribute '{name}'"):
            getattr(sim, name)
    assert sim.iinfo(np.int8).max == 127
    assert sim.float32 is np.float32


CALLS_WITH_ARGUMENTS_CUPY_LACKS: Final[dict[str, Callable[[Any], Any]]] = {
    "np.sum where": lambda x: np.sum(x, where=x > 0),
    "sim.sum initial": lambda x: sim.sum(x, initial=0.0),
    "np.max initial": lambda x: np.max(x, initial=0.0),
    "np.zeros_like device": lambda x: np.zeros_like(x, device="cpu"),
    "np.reshape shape": lambda x: np.reshape(x, shape=(2, 2)),  # CuPy's parameter is newshape
    "np.concatenate foo": lambda x: np.concatenate([x, x], axis=0, foo=1),
    "ndarray.sum where": lambda x: x.sum(where=x > 0),
    "ndarray.max initial": lambda x: x.max(initial=0.0),
    "ndarray.item index": lambda x: x.item(0),
    "ndarray.astype device": lambda x: x.astype(np.float32, device="cpu"),
}


@pytest.mark.parametrize("name", CALLS_WITH_ARGUMENTS_CUPY_LACKS)
def test_an_argument_cupy_lacks_is_a_type_error(name: str) -> None:
    x = sim.arange(4, dtype=np.float64)
    with pytest.raises(TypeError, match=r"argument|positional"):
        CALLS_WITH_ARGUMENTS_CUPY_LACKS[name](x)


def test_an_array_is_no_index_and_in_iterates() -> None:
    """CuPy's ndarray has neither ``__index__`` nor ``__contains__``: ``x in a`` iterates over
    the first axis, comparing each item."""
    x = sim.asarray(np.array([3.0, 5.0]))
    assert not hasattr(sim.ndarray, "__index__")
    assert not hasattr(sim.ndarray, "__contains__")
    with pytest.raises(TypeError, match="cannot be interpreted as an integer"):
        operator.index(sim.asarray(1))
    with pytest.raises(TypeError, match="list indices must be integers"):
        [3, 1][sim.asarray(1)]  # type: ignore[index]
    assert 5.0 in x
    assert 4.0 not in x
    with pytest.raises(ValueError, match="ambiguous"):
        1.0 in sim.asarray(np.ones((2, 2)))  # noqa: B015 - a row compared is not one truth value


def test_matmul_in_place_binds_a_new_array() -> None:
    """CuPy's ndarray has no ``__imatmul__``: ``a @= b`` is ``a = a @ b``, and the array ``a``
    named before is unchanged."""
    a = sim.asarray(np.eye(2))
    before = a
    a @= sim.asarray(np.full((2, 2), 2.0))
    assert a is not before
    np.testing.assert_array_equal(before.get(), np.eye(2))
    np.testing.assert_array_equal(a.get(), np.full((2, 2), 2.0))


def test_as_strided_is_a_view_with_the_host_buffers_strides() -> None:
    x = sim.asarray(np.arange(12.0).reshape(3, 4))
    st = x.strides
    assert st == (32, 8)
    v = sim.lib.stride_tricks.as_strided(x, shape=(2, 3, 2), strides=(st[0], st[1], st[1]))
    assert v.strides == (32, 8, 8)
    assert v.base is x
    np.testing.assert_array_equal(
        v.get(), np.lib.stride_tricks.sliding_window_view(x.get()[:2], 2, 1)[:, :3]
    )
    x[0, 1] = -1.0  # the view shares the buffer
    assert v[0, 0, 1].item() == -1.0
    assert v[0, 1, 0].item() == -1.0
    np.testing.assert_array_equal(sim.lib.stride_tricks.as_strided(x).get(), x.get())
    with pytest.raises(TypeError, match="writeable"):
        sim.lib.stride_tricks.as_strided(x, (3, 4), st, writeable=False)  # type: ignore[call-arg]


# ----------------------------------------------------------------------------- CuPy's surface
# Where the simulator differs from CuPy on purpose: the name, and why.
NOT_CUPYS: Final[dict[str, str]] = {
    "configure": "the simulator's own settings (devices, delays), not a CuPy name",
    "inject_fault": "the simulator's own: breaks a device as a failed kernel does (sticky errors)",
    "reset_device": "the simulator's own: repairs a device broken by inject_fault, for tests",
    "forbid_host_sync": "the simulator's own: host waits raise, to find them in tests",
    "record_host_syncs": "the simulator's own: collects host waits, to find them in tests",
    "HostSyncError": "the simulator's own: what forbid_host_sync raises",
    "count_device_work": "the simulator's own: counts what a GPU would pay, for benchmarks",
    "DeviceCounts": "the simulator's own: what count_device_work counts",
    "model_kernel": "the simulator's own: the NumPy model a raw kernel runs as",
    "StreamOrderError": "the simulator's own: what the ordering check raises",
    # The classes are also at the simulator's top level for its own tests; CuPy has them only
    # under cuda and cuda.runtime, where they are checked ("cuda.Device", ...). asyncgrad reaches
    # them through rt.cuda.
    "Device": "also cuda.Device",
    "Stream": "also cuda.Stream",
    "Event": "also cuda.Event",
    "CUDARuntimeError": "also cuda.runtime.CUDARuntimeError",
}

# CuPy's names of the simulator's top-level names elsewhere: cupyx's functions.
CUPYX_NAMES: Final[dict[str, str]] = {
    "erf": "cupyx.scipy.special.erf",
    "scatter_add": "cupyx.scatter_add",
}

# Members every Python class has, which are no part of an API.
PLUMBING: Final = frozenset(
    {
        "__annotations__",
        "__dict__",
        "__doc__",
        "__firstlineno__",
        "__module__",
        "__qualname__",
        "__slotnames__",  # cached on a class by copyreg once an instance was copied or pickled
        "__slots__",
        "__static_attributes__",
        "__weakref__",
    }
)

needs_cupy = pytest.mark.skipif(cupy is None, reason=NO_CUPY)


def _split_params(text: str) -> list[str]:
    """The parameters of a signature's text, split at the commas outside brackets and quotes."""
    params: list[str] = []
    depth, quote, start = 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            params.append(text[start:i].strip())
            start = i + 1
    last = text[start:].strip()
    return [*params, last] if last else params


def _from_text(text: str) -> inspect.Signature:
    """A signature from a Cython docstring's first line, ``name(self, int axis=-1, kind=None)``:
    C types are dropped (the last word before ``=`` is the name)."""
    match = re.match(r"^\s*[\w.]*\((.*)\)\s*(->.*)?$", text)
    if match is None:
        raise ValueError(f"no signature in {text!r}")
    params = []
    for param in _split_params(match.group(1)):
        name, eq, default = param.partition("=")
        params.append(name.split()[-1] + eq + default)
    namespace: dict[str, Any] = {"numpy": np}
    exec(f"def f({', '.join(params)}): pass", namespace)  # CuPy's own docstring's parameters
    return inspect.signature(namespace["f"])


def cupy_signature(obj: Any) -> inspect.Signature:
    """CuPy's signature of ``obj``: ``inspect.signature`` where Python knows it (Python functions,
    builtins with a ``__text_signature__``), else the first line of the docstring, where Cython
    writes the signature of its functions and methods."""
    try:
        return inspect.signature(obj)
    except (TypeError, ValueError):
        pass
    doc = (getattr(obj, "__doc__", None) or "").strip()
    return _from_text(doc.splitlines()[0] if doc else "")


def _params(sig: inspect.Signature) -> list[tuple[str, Any, Any]]:
    """Names, kinds and defaults, without ``self``/``cls`` and annotations."""
    params = list(sig.parameters.values())
    if params and params[0].name in ("self", "cls"):
        params = params[1:]
    return [(p.name, p.kind, p.default) for p in params]


def same_signature(
    problems: list[str], what: str, ours: inspect.Signature, theirs: inspect.Signature
) -> None:
    """Note in ``problems`` where the parameters of the two signatures differ."""
    a, b = _params(ours), _params(theirs)
    if a != b:
        P = inspect.Parameter
        problems.append(
            f"{what}: the simulator's parameters differ from CuPy's\n"
            f"  simulator: {inspect.Signature([P(n, k, default=d) for n, k, d in a])}\n"
            f"  CuPy:      {inspect.Signature([P(n, k, default=d) for n, k, d in b])}"
        )


def assert_none(problems: list[str]) -> None:
    assert not problems, "\n".join(problems)


def _cupy_object(path: str) -> Any:
    """CuPy's object at ``cupy.a.b`` (or ``cupyx.…``); fails the test when there is none."""
    root, *parts = path.split(".")
    obj: Any = {"cupy": cupy, "cupyx": cupyx}[root]
    for i, part in enumerate(parts):
        if not hasattr(obj, part):
            pytest.fail(
                f"CuPy has no {'.'.join([root, *parts[: i + 1]])}, which the simulator offers"
            )
        obj = getattr(obj, part)
    return obj


def _constructor(cls: type) -> Callable[..., Any]:
    return cls.__new__ if "__new__" in vars(cls) else cls.__init__  # type: ignore[misc]


def _is_property(obj: Any) -> bool:
    return (
        isinstance(obj, property)
        or inspect.isgetsetdescriptor(obj)
        or inspect.ismemberdescriptor(obj)
    )


# Attributes that CuPy's classes set on their instances, where no instance can be made without a
# GPU to look at: the class, and the names its ``__init__`` sets (read in CuPy's source).
INSTANCE_ATTRIBUTES: Final[dict[str, frozenset[str]]] = {
    "cupy.cuda.Event": frozenset({"ptr"}),  # Event.__init__: self.ptr = eventCreateWithFlags(...)
}


def _instance(path: str) -> Any:
    """An instance of CuPy's class at ``path`` that exists without a GPU (None: none does), whose
    attributes set at construction are checked."""
    if path == "cupy.cuda.Stream":
        return cupy.cuda.Stream.null
    return None


def _has_instance_attribute(path: str, name: str) -> bool:
    return name in INSTANCE_ATTRIBUTES.get(path, ()) or hasattr(_instance(path), name)


def _cupy_constructor(theirs: type) -> inspect.Signature:
    """The parameters of CuPy's class: its ``__init__``'s, or the class docstring's first line
    (``Device(device=None)``) where ``__init__`` is C's generic one."""
    P = inspect.Parameter
    generic = [("args", P.VAR_POSITIONAL, P.empty), ("kwargs", P.VAR_KEYWORD, P.empty)]
    try:
        sig = cupy_signature(theirs.__init__)
        if _params(sig) != generic:
            return sig
    except ValueError:
        pass
    return _from_text((theirs.__doc__ or "").strip().splitlines()[0])


def check_class(problems: list[str], path: str, ours: type, theirs: Any) -> None:
    """Every public member and dunder of ``ours`` exists on CuPy's class ``theirs``: methods with
    CuPy's parameters, attributes as attributes; the constructor takes CuPy's arguments."""
    for name, member in vars(ours).items():
        if name in PLUMBING or (name.startswith("_") and not name.startswith("__")):
            continue
        what = f"{path}.{name}"
        if member is None:  # __hash__ = None: unhashable, as CuPy's ndarray
            if getattr(theirs, name, None) is not None:
                problems.append(f"{what} is None on the simulator, not in CuPy")
            continue
        if _is_property(member) or not callable(member):
            # An attribute: on CuPy's class (a property), or set on its instances.
            if hasattr(theirs, name):
                theirs_member = inspect.getattr_static(theirs, name)
                if callable(theirs_member) and not _is_property(theirs_member):
                    problems.append(f"{what} is an attribute on the simulator, a method in CuPy")
            elif not _has_instance_attribute(path, name):
                problems.append(f"CuPy's {path} has no attribute {name!r}")
            continue
        if not hasattr(theirs, name):
            problems.append(f"CuPy's {path} has no {name!r}")
            continue
        if name.startswith("__"):
            continue  # operators and protocols: their parameter names are CPython's
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        theirs_sig = cupy_signature(getattr(theirs, name))
        same_signature(problems, what, inspect.signature(member), theirs_sig)
    ours_init = inspect.signature(_constructor(ours))
    same_signature(problems, f"{path}()", ours_init, _cupy_constructor(theirs))


def check_object(problems: list[str], path: str, ours: Any) -> None:
    """The public members of one of the simulator's namespace objects (``cuda``, ``runtime``,
    ``random``, ``lib``, ...), against CuPy's module or class at ``path``."""
    theirs = _cupy_object(path)
    for name in dir(type(ours)):
        if name.startswith("_"):
            continue
        member = getattr(ours, name)
        sub = f"{path}.{name}"
        if not hasattr(theirs, name):
            problems.append(f"CuPy has no {sub}")
        elif isinstance(member, type):
            if issubclass(member, BaseException):
                if not issubclass(getattr(theirs, name), BaseException):
                    problems.append(f"{sub} is no exception in CuPy")
            else:
                check_class(problems, sub, member, getattr(theirs, name))
        elif callable(member):
            theirs_sig = cupy_signature(getattr(theirs, name))
            same_signature(problems, sub, inspect.signature(member), theirs_sig)
        elif type(member).__module__ == sim.__name__:
            check_object(problems, sub, member)


def _top_level() -> list[str]:
    return [name for name in sim.__all__ if name not in NOT_CUPYS]


def test_cupy_imports_under_pytest_when_installed() -> None:
    """The test packages must not hide CuPy's dependencies: with ``tests`` itself on sys.path
    (no tests/__init__.py), tests/cuda was the top-level package ``cuda``, in place of NVIDIA's
    ``cuda`` namespace package, and ``import cupy`` (which imports ``cuda.pathfinder``) failed
    under pytest: every CUDA test skipped on a GPU, and this check here."""
    if importlib.util.find_spec("cupy") is None:
        pytest.skip("CuPy is not installed")
    assert cupy is not None, NO_CUPY


@needs_cupy
@pytest.mark.parametrize("name", _top_level())
def test_top_level_name_is_cupys(name: str) -> None:
    ours = getattr(sim, name)
    path = CUPYX_NAMES.get(name, f"cupy.{name}")
    theirs = _cupy_object(path)
    problems: list[str] = []
    if isinstance(ours, type):
        check_class(problems, path, ours, theirs)
    elif callable(ours) and type(theirs) is cupy.ufunc:
        # CuPy's is a ufunc (cupyx.scipy.special.erf): the simulator's function takes its input.
        assert theirs.nin == len(inspect.signature(ours).parameters), name
    elif callable(ours):
        same_signature(problems, path, inspect.signature(ours), cupy_signature(theirs))
    elif type(ours).__module__ == sim.__name__:
        check_object(problems, path, ours)
    else:
        assert theirs is ours or theirs == ours, name
    assert_none(problems)


@needs_cupy
@pytest.mark.parametrize("name", sorted(sim._CUPY_FUNCTIONS))
def test_function_table_has_cupys_signatures(name: str) -> None:
    problems: list[str] = []
    theirs = cupy_signature(_cupy_object(f"cupy.{name}"))
    same_signature(problems, f"cupy.{name}", sim._cupy_signature(name), theirs)
    assert_none(problems)


@needs_cupy
@pytest.mark.parametrize("name", sorted(sim._CUPY_UFUNCS))
def test_ufunc_table_names_cupys_ufuncs(name: str) -> None:
    theirs = _cupy_object(f"cupy.{name}")
    if name == "matmul":  # a generalized ufunc, with its own keywords
        call = inspect.signature(type(theirs).__call__)
        keywords = {p.name for p in call.parameters.values() if p.kind is p.KEYWORD_ONLY}
        assert keywords == sim._GUFUNC_KEYWORDS
        return
    assert type(theirs) is cupy.ufunc
    assert (theirs.nin, theirs.nout) == (getattr(np, name).nin, getattr(np, name).nout), name


@needs_cupy
@pytest.mark.parametrize("method", sorted(sim._UFUNC_METHODS))
def test_ufunc_methods_have_cupys_signatures(method: str) -> None:
    problems: list[str] = []
    theirs = cupy_signature(getattr(cupy.ufunc, method))
    same_signature(problems, f"cupy.ufunc.{method}", sim._cupy_signature(f".{method}"), theirs)
    assert_none(problems)
    if method == "at":  # the ufuncs with a scatter operation (the others raise)
        scatter = {n for n in sim._CUPY_UFUNCS if getattr(getattr(cupy, n), "_scatter_op", None)}
        assert sim._UFUNC_METHODS["at"][1] == scatter
    # reduce, accumulate and reduceat test the ufunc's name inside the call, which needs a GPU:
    # their sets are those of CuPy's source (cupy/_core/_kernel.pyx).


@needs_cupy
def test_ndarray_is_cupys() -> None:
    problems: list[str] = []
    check_class(problems, "cupy.ndarray", sim.ndarray, cupy.ndarray)
    assert_none(problems)


@needs_cupy
def test_classes_passed_through_are_cupys() -> None:
    for name in sim._CUPY_CLASSES:
        assert getattr(cupy, name) is getattr(np, name), name


@needs_cupy
@pytest.mark.parametrize(
    "func", sorted(sim._HANDLERS, key=lambda f: f.__name__), ids=lambda f: f.__name__
)
def test_a_handled_numpy_function_cupy_lacks_is_not_offered(func: Any) -> None:
    name = func.__name__
    if hasattr(cupy, name):
        assert name in sim._CUPY_FUNCTIONS or name in sim._CUPY_UFUNCS, (
            f"{name}: offered by CuPy, not listed"
        )
    else:
        with pytest.raises(AttributeError):
            getattr(sim, name)
