"""The module tree a script touches at start-up: ag.accelerator, ag.backends, ag.nn.parallel,
ag.utils.data's submodules, ag.onnx, the legacy tensor types, dtype facts (finfo, iinfo,
promote_types, result_type, can_cast), the process-wide settings, autocast and GradScaler. Each
against torch where installed."""

from __future__ import annotations

import importlib
import itertools
import warnings
from collections.abc import Iterator
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
LEGACY = [
    "FloatTensor",
    "DoubleTensor",
    "HalfTensor",
    "LongTensor",
    "IntTensor",
    "ShortTensor",
    "CharTensor",
    "ByteTensor",
    "BoolTensor",
]


def _td(d: Any) -> Any:
    """torch's dtype of the same name."""
    return getattr(torch, "bool" if d == ag.bool else str(d))


def _outcome(fn: Any) -> Any:
    try:
        return ("ok", fn())
    except Exception as e:
        return ("error", type(e).__name__)


@pytest.fixture
def restore_default_dtype() -> Iterator[None]:
    before = ag.get_default_dtype()
    yield
    ag.set_default_dtype(before)


# ----- ag.accelerator -----
def test_accelerator_answers_as_torch_for_its_devices() -> None:
    names = {n for n in dir(torch.accelerator) if not n.startswith("_")}
    ours = set(ag.accelerator.__all__)
    assert {"is_available", "current_accelerator", "device_count", "synchronize"} <= ours
    assert ours <= names | {"device_index"}
    if ag.cuda.is_available():  # the simulated devices of tests/conftest.py
        assert ag.accelerator.is_available()
        assert ag.accelerator.current_accelerator() == ag.device("cuda")
        assert ag.accelerator.device_count() == ag.cuda.device_count()
        assert ag.accelerator.current_device_index() == ag.cuda.current_device()
        with ag.accelerator.device_index(1):
            assert ag.cuda.current_device() == 1
        assert ag.accelerator.current_device_index() == 0
        ag.accelerator.synchronize()
    else:
        assert ag.accelerator.is_available() is torch.accelerator.is_available()
        assert ag.accelerator.current_accelerator() is None
        assert ag.accelerator.device_count() == 0


def test_accelerator_without_a_device_raises_torchs_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ag.cuda, "is_available", lambda: False)
    assert ag.accelerator.is_available() is False
    assert ag.accelerator.current_accelerator() is None
    assert ag.accelerator.device_count() == 0
    for fn in (
        ag.accelerator.current_device_index,
        ag.accelerator.synchronize,
        ag.accelerator.empty_cache,
        ag.accelerator.memory_allocated,
    ):
        with pytest.raises(RuntimeError, match="Cannot access accelerator device when none"):
            fn()
        if not torch.accelerator.is_available():
            with pytest.raises(RuntimeError, match="Cannot access accelerator device when none"):
                getattr(torch.accelerator, fn.__name__)()


# ----- ag.backends -----
def test_backend_flags_start_as_torchs_and_read_back_as_set() -> None:
    cudnn = importlib.import_module("asyncgrad.backends.cudnn")
    assert cudnn is ag.backends.cudnn
    for flag in ("enabled", "benchmark", "deterministic", "allow_tf32"):
        assert getattr(cudnn, flag) == getattr(torch.backends.cudnn, flag), flag
    assert cudnn.is_available() is False
    assert cudnn.version() is None
    before = cudnn.benchmark
    cudnn.benchmark = True
    assert ag.backends.cudnn.benchmark is True
    cudnn.benchmark = before
    with cudnn.flags(enabled=False, deterministic=True):
        assert (cudnn.enabled, cudnn.deterministic) == (False, True)
    assert (cudnn.enabled, cudnn.deterministic) == (True, False)
    assert ag.backends.mps.is_available() is torch.backends.mps.is_available() is False
    assert ag.backends.mps.is_built() is False
    for lib in ("mkl", "openmp", "mkldnn"):
        assert getattr(ag.backends, lib).is_available() is False
    assert ag.backends.mkldnn.enabled is True
    has = importlib.util.find_spec("opt_einsum") is not None
    assert ag.backends.opt_einsum.is_available() is has
    assert ag.backends.opt_einsum.is_available() is torch.backends.opt_einsum.is_available()
    assert ag.backends.cpu.get_cpu_capability() == "DEFAULT"


def test_cuda_matmul_allow_tf32_is_ag_cudas_switch() -> None:
    m = ag.backends.cuda.matmul
    assert m.allow_tf32 is torch.backends.cuda.matmul.allow_tf32 is False
    m.allow_tf32 = True
    try:
        assert ag.cuda.matmul.allow_tf32 is True
    finally:
        m.allow_tf32 = False
    assert ag.cuda.matmul.allow_tf32 is False
    assert m.allow_fp16_reduced_precision_reduction is True
    assert ag.backends.cuda.flash_sdp_enabled() is True
    assert ag.backends.cuda.is_built() is ag.cuda.is_available()


# ----- ag.nn.parallel -----
def test_data_parallel_wraps_and_calls_the_module() -> None:
    lin = ag.nn.Linear(3, 2)
    dp = ag.nn.DataParallel(lin)
    assert dp.module is lin
    assert ag.nn.parallel.DataParallel is ag.nn.DataParallel
    tdp = torch.nn.DataParallel(torch.nn.Linear(3, 2))
    assert list(dp.state_dict()) == list(tdp.state_dict())
    assert dp.device_ids == tdp.device_ids == []
    x = ag.randn(4, 3)
    assert ag.equal(dp(x), lin(x))
    dp(x).sum().backward()
    assert lin.weight.grad is not None
    with pytest.raises(TypeError, match="DataParallel wraps a Module"):
        ag.nn.DataParallel(lambda v: v)  # type: ignore[arg-type]


def test_distributed_data_parallel_needs_a_default_group_as_torchs() -> None:
    with pytest.raises(ValueError, match="Default process group has not been initialized"):
        torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="Default process group has not been initialized"):
        ag.nn.parallel.DistributedDataParallel(ag.nn.Linear(2, 2))


# ----- ag.utils.data's modules -----
def test_data_submodules_hold_torchs_names() -> None:
    for mod, names in {
        "dataloader": ["DataLoader", "default_collate", "get_worker_info"],
        "dataset": ["Dataset", "IterableDataset", "TensorDataset", "Subset", "ConcatDataset"],
        "sampler": [
            "Sampler",
            "SequentialSampler",
            "RandomSampler",
            "SubsetRandomSampler",
            "WeightedRandomSampler",
            "BatchSampler",
        ],
        "distributed": ["DistributedSampler"],
    }.items():
        ours = importlib.import_module(f"asyncgrad.utils.data.{mod}")
        theirs = importlib.import_module(f"torch.utils.data.{mod}")
        for name in names:
            assert hasattr(theirs, name), (mod, name)
            assert getattr(ours, name) is getattr(ag.utils.data, name), (mod, name)
    assert ag.utils.data.random_split is ag.utils.data.dataset.random_split
    assert ag.utils.data.get_worker_info() is torch.utils.data.get_worker_info() is None


@pytest.mark.parametrize("n", [0, 1, 7, 10])
@pytest.mark.parametrize("batch_size", [1, 3, 4])
@pytest.mark.parametrize("drop_last", [False, True])
def test_sequential_and_batch_samplers_match_torch(
    n: int, batch_size: int, drop_last: bool
) -> None:
    data = list(range(n))
    ours = ag.utils.data.BatchSampler(ag.utils.data.SequentialSampler(data), batch_size, drop_last)
    theirs = torch.utils.data.BatchSampler(
        torch.utils.data.SequentialSampler(data), batch_size, drop_last
    )
    assert list(ours) == list(theirs)
    assert len(ours) == len(theirs)


@pytest.mark.parametrize(("n", "replicas"), [(7, 3), (10, 2), (2, 4), (9, 3)])
@pytest.mark.parametrize("drop_last", [False, True])
def test_distributed_sampler_shares_match_torch(n: int, replicas: int, drop_last: bool) -> None:
    data = list(range(n))
    seen: list[int] = []
    for rank in range(replicas):
        ours = ag.utils.data.DistributedSampler(data, replicas, rank, False, drop_last=drop_last)
        theirs = torch.utils.data.DistributedSampler(
            data, replicas, rank, shuffle=False, drop_last=drop_last
        )
        assert list(ours) == list(theirs)
        assert len(ours) == len(theirs)
        shuffled = ag.utils.data.DistributedSampler(data, replicas, rank, drop_last=drop_last)
        shuffled.set_epoch(3)
        seen += list(shuffled)
    if not drop_last:
        assert set(seen) == set(data)
    with pytest.raises(ValueError, match="Default process group has not been initialized"):
        ag.utils.data.DistributedSampler(data)
    with pytest.raises(ValueError, match="Invalid rank"):
        ag.utils.data.DistributedSampler(data, 2, 2)


def test_random_samplers_draw_from_the_seeded_generator() -> None:
    data = list(range(6))
    g = ag.Generator().manual_seed(3)
    order = list(ag.utils.data.RandomSampler(data, generator=g))
    assert sorted(order) == data
    assert order == list(ag.utils.data.RandomSampler(data, generator=ag.Generator().manual_seed(3)))
    with_repl = list(ag.utils.data.RandomSampler(data, True, 20))
    assert len(with_repl) == 20
    assert set(with_repl) <= set(data)
    longer = list(ag.utils.data.RandomSampler(data, num_samples=9))
    assert len(longer) == 9
    assert sorted(longer[:6]) == data
    sub = list(ag.utils.data.SubsetRandomSampler([5, 7, 9]))
    assert sorted(sub) == [5, 7, 9]
    w = list(ag.utils.data.WeightedRandomSampler([0.0, 1.0, 0.0, 2.0], 50))
    assert set(w) <= {1, 3}
    assert len(ag.utils.data.WeightedRandomSampler([1.0, 1.0], 5)) == 5
    for bad in (0, -1):
        with pytest.raises(ValueError, match="num_samples should be a positive integer"):
            ag.utils.data.RandomSampler(data, num_samples=bad)
        with pytest.raises(ValueError, match="num_samples should be a positive integer"):
            torch.utils.data.RandomSampler(data, num_samples=bad)
        with pytest.raises(ValueError, match="batch_size should be a positive integer"):
            ag.utils.data.BatchSampler(data, bad, False)


def test_data_loader_takes_samplers_and_iterable_datasets() -> None:
    ds = ag.utils.data.TensorDataset(ag.arange(10))
    bs = ag.utils.data.BatchSampler(ag.utils.data.SequentialSampler(ds), 4, False)
    loader = ag.utils.data.DataLoader(ds, batch_sampler=bs)
    assert [b[0].tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert len(loader) == 3
    rev = ag.utils.data.DataLoader(ds, batch_size=3, sampler=list(range(9, -1, -1)))
    assert [b[0].tolist() for b in rev] == [[9, 8, 7], [6, 5, 4], [3, 2, 1], [0]]
    with pytest.raises(ValueError, match="sampler option is mutually exclusive with shuffle"):
        ag.utils.data.DataLoader(ds, sampler=[0], shuffle=True)
    with pytest.raises(ValueError, match="batch_sampler option is mutually exclusive"):
        ag.utils.data.DataLoader(ds, batch_size=2, batch_sampler=bs)

    class Stream(ag.utils.data.IterableDataset):  # type: ignore[type-arg]
        def __iter__(self) -> Iterator[int]:
            return iter(range(5))

    assert [b.tolist() for b in ag.utils.data.DataLoader(Stream(), batch_size=2)] == [
        [0, 1],
        [2, 3],
        [4],
    ]
    with pytest.raises(ValueError, match="expected unspecified shuffle option"):
        ag.utils.data.DataLoader(Stream(), shuffle=True)
    both = ag.utils.data.ConcatDataset([list(range(3)), list(range(10, 12))])
    tboth = torch.utils.data.ConcatDataset([list(range(3)), list(range(10, 12))])
    assert [both[i] for i in range(-5, 5)] == [tboth[i] for i in range(-5, 5)]
    assert len(both) == len(tboth) == 5
    assert list(ag.utils.data.ChainDataset([Stream(), Stream()])) == [*range(5), *range(5)]
    shuffled = ag.utils.data.DataLoader(ds, batch_size=10, shuffle=True)
    assert shuffled.shuffle
    assert sorted(next(iter(shuffled))[0].tolist()) == list(range(10))


# ----- ag.onnx -----
def test_onnx_export_says_it_is_not_supported() -> None:
    with pytest.raises(NotImplementedError, match="no ONNX exporter"):
        ag.onnx.export(ag.nn.Linear(2, 2), (ag.zeros(1, 2),), "m.onnx")
    assert ag.onnx.is_in_onnx_export() is torch.onnx.is_in_onnx_export() is False


# ----- legacy tensor types -----
@pytest.mark.parametrize("name", LEGACY)
def test_legacy_types_build_and_recognise_as_torchs(name: str) -> None:
    ours, theirs = getattr(ag, name), getattr(torch, name)
    for args in [(), (2, 3), (0,), ([1, 0, 2],), ([[1.5, 2.0]],), (ag.Size([2, 1]),)]:
        targs = tuple(torch.Size(a) if isinstance(a, ag.Size) else a for a in args)
        a, t = ours(*args), theirs(*targs)
        assert type(a) is ag.Tensor
        assert tuple(a.shape) == tuple(t.shape)
        assert _td(a.dtype) == t.dtype
        if args and not isinstance(args[0], (int, ag.Size)):
            np.testing.assert_array_equal(a.numpy(), t.numpy())
    for d in DTYPES:
        assert isinstance(ag.zeros(2, dtype=d), ours) is isinstance(
            torch.zeros(2, dtype=_td(d)), theirs
        )
    assert not isinstance([1.0], ours)
    assert not issubclass(ours, ag.Tensor)
    same = ag.zeros(2, dtype=ours.dtype)
    assert ours(same) is same
    other = ag.zeros(2, dtype=ag.float64 if ours.dtype != ag.float64 else ag.float32)
    with pytest.raises(TypeError):
        theirs(torch.zeros(2, dtype=_td(other.dtype)))
    with pytest.raises(TypeError, match="expected"):
        ours(other)
    with pytest.raises(TypeError):
        ours(2.5)
    assert repr(ours) == repr(theirs)
    assert ag.zeros(2).type(ours).dtype == ours.dtype


def test_legacy_types_on_cuda_are_not_cpu_types() -> None:
    if not ag.cuda.is_available():
        pytest.skip("needs a (simulated) CUDA device")
    assert not isinstance(ag.zeros(2, device="cuda"), ag.FloatTensor)


def test_typename_as_torchs() -> None:
    for d in DTYPES[:6] + DTYPES[9:]:
        assert ag.typename(ag.zeros(1, dtype=d)) == torch.typename(torch.zeros(1, dtype=_td(d)))
    for obj in (3, "s", 2.5, None, int, len, [1]):
        assert ag.typename(obj) == torch.typename(obj)
    assert ag.typename(ag.nn.Linear) == f"{ag.nn.Linear.__module__}.Linear"
    assert torch.typename(torch.nn.Linear) == "torch.nn.modules.linear.Linear"


def test_legacy_constructors_are_cpu_only_as_torchs() -> None:
    assert ag.FloatTensor(2, device="cpu").device == ag.device("cpu")
    with pytest.raises(RuntimeError, match="legacy constructor expects device type: cpu"):
        torch.FloatTensor(2, device="meta")
    with pytest.raises(RuntimeError, match="legacy constructor expects device type: cpu"):
        ag.FloatTensor(2, device="cuda")


def test_set_default_tensor_type_warns_and_sets_the_dtype(restore_default_dtype: None) -> None:
    with pytest.warns(UserWarning, match="set_default_tensor_type\\(\\) is deprecated"):
        ag.set_default_tensor_type(ag.DoubleTensor)
    assert ag.get_default_dtype() == ag.float64
    assert ag.tensor([1.5]).dtype == ag.float64
    with pytest.warns(UserWarning, match="deprecated"):
        ag.set_default_tensor_type("torch.FloatTensor")
    assert ag.get_default_dtype() == ag.float32
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(TypeError, match="only floating-point types are supported"):
            torch.set_default_tensor_type(torch.LongTensor)
        with pytest.raises(TypeError, match="only floating-point types are supported"):
            ag.set_default_tensor_type(ag.LongTensor)
        with pytest.raises(TypeError, match="invalid type object"):
            torch.set_default_tensor_type(torch.float32)
        with pytest.raises(TypeError, match="invalid type object"):
            ag.set_default_tensor_type(ag.float32)
        with pytest.raises(TypeError, match="invalid type"):
            ag.set_default_tensor_type("torch.NoSuchTensor")
    assert ag.get_default_dtype() == ag.float32


def test_layouts_memory_formats_and_newaxis() -> None:
    for name in ("strided", "sparse_coo", "contiguous_format", "preserve_format", "channels_last"):
        assert repr(getattr(ag, name)) == repr(getattr(torch, name))
    assert isinstance(ag.strided, ag.layout)
    assert isinstance(ag.channels_last, ag.memory_format)
    assert ag.newaxis is torch.newaxis is None
    assert ag.zeros(2, 3)[:, ag.newaxis].shape == (2, 1, 3)
    import pickle

    assert pickle.loads(pickle.dumps(ag.channels_last)) is ag.channels_last


# ----- dtype facts -----
@pytest.mark.parametrize("d", DTYPES, ids=str)
def test_finfo_and_iinfo_as_torchs(d: Any) -> None:
    td = _td(d)
    if d.kind == "f":
        ours, theirs = ag.finfo(d), torch.finfo(td)
        for attr in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype"):
            assert getattr(ours, attr) == getattr(theirs, attr), attr
        assert repr(ours) == repr(theirs)
        with pytest.raises(TypeError, match="requires an integer input type"):
            ag.iinfo(d)
    else:
        with pytest.raises(TypeError, match="requires a floating point input type"):
            ag.finfo(d)
        if d == ag.bool:
            with pytest.raises(TypeError, match=r"torch\.bool is not supported by torch\.iinfo"):
                ag.iinfo(d)
            return
        ours2, theirs2 = ag.iinfo(d), torch.iinfo(td)
        for attr in ("bits", "max", "min", "dtype"):
            assert getattr(ours2, attr) == getattr(theirs2, attr), attr
        assert repr(ours2) == repr(theirs2)


def test_finfo_without_a_type_is_the_default_dtypes(restore_default_dtype: None) -> None:
    assert ag.finfo().dtype == torch.finfo().dtype == "float32"
    ag.set_default_dtype(ag.float64)
    assert ag.finfo().bits == 64


def test_promote_types_and_can_cast_over_every_pair() -> None:
    for a, b in itertools.product(DTYPES, DTYPES):
        theirs = _outcome(lambda a=a, b=b: torch.promote_types(_td(a), _td(b)))
        ours = _outcome(lambda a=a, b=b: _td(ag.promote_types(a, b)))
        assert ours == theirs, (a, b)
        assert ag.can_cast(a, b) == torch.can_cast(_td(a), _td(b)), (a, b)
    with pytest.raises(RuntimeError, match="Promotion for uint16, uint32, uint64 types"):
        ag.promote_types(ag.uint32, ag.int64)


def _operand(kind: str, d: Any) -> tuple[Any, Any]:
    if kind == "dim":
        return ag.ones(2, dtype=d), torch.ones(2, dtype=_td(d))
    if kind == "zero":
        return ag.ones((), dtype=d), torch.ones((), dtype=_td(d))
    value = {"b": True, "i": 2, "u": 2, "f": 2.5}[d.kind]
    return value, value


@pytest.mark.parametrize("kinds", list(itertools.product(("dim", "zero", "num"), repeat=2)))
def test_result_type_as_torchs(kinds: tuple[str, str]) -> None:
    sample = [ag.bool, ag.uint8, ag.int8, ag.int32, ag.int64, ag.float16, ag.float32, ag.float64]
    for a, b in itertools.product(sample, sample):
        (x, tx), (y, ty) = _operand(kinds[0], a), _operand(kinds[1], b)
        assert _td(ag.result_type(x, y)) == torch.result_type(tx, ty), (kinds, a, b)
    with pytest.raises(TypeError, match="expected a Tensor or a Number"):
        ag.result_type(ag.ones(1), "x")


# ----- process-wide settings -----
def test_deterministic_settings_as_torchs() -> None:
    def state(lib: Any) -> tuple[Any, ...]:
        return (
            lib.are_deterministic_algorithms_enabled(),
            lib.is_deterministic_algorithms_warn_only_enabled(),
            lib.get_deterministic_debug_mode(),
        )

    try:
        for lib in (ag, torch):
            assert state(lib) == (False, False, 0)
        for call in (
            lambda lib: lib.use_deterministic_algorithms(True),
            lambda lib: lib.use_deterministic_algorithms(True, warn_only=True),
            lambda lib: lib.set_deterministic_debug_mode("error"),
            lambda lib: lib.set_deterministic_debug_mode(1),
            lambda lib: lib.use_deterministic_algorithms(False),
        ):
            call(ag)
            call(torch)
            assert state(ag) == state(torch)
        for bad, match in (("bad", "expected one of `default`"), (5, "expected 0, 1, or 2")):
            with pytest.raises(RuntimeError, match=match):
                torch.set_deterministic_debug_mode(bad)
            with pytest.raises(RuntimeError, match=match):
                ag.set_deterministic_debug_mode(bad)
    finally:
        ag.use_deterministic_algorithms(False)
        torch.use_deterministic_algorithms(False)


def test_matmul_precision_threads_and_denormals() -> None:
    assert ag.get_float32_matmul_precision() == torch.get_float32_matmul_precision() == "highest"
    ag.set_float32_matmul_precision("high")
    try:
        assert ag.get_float32_matmul_precision() == "high"
        with pytest.warns(UserWarning, match="is not one of 'highest', 'high', or 'medium'"):
            ag.set_float32_matmul_precision("fastest")
        assert ag.get_float32_matmul_precision() == "high"
    finally:
        ag.set_float32_matmul_precision("highest")
    before = ag.get_num_interop_threads()
    ag.set_num_interop_threads(3)
    assert ag.get_num_interop_threads() == 3
    ag.set_num_interop_threads(before)
    for bad in (0, -1, True):
        with pytest.raises(RuntimeError, match="set_num_interop_threads expects a positive"):
            ag.set_num_interop_threads(bad)
    with pytest.raises(RuntimeError, match="set_num_interop_threads expects a positive"):
        torch.set_num_interop_threads(0)
    ag.init_num_threads()
    assert ag.set_flush_denormal(True) is False
    tiny = ag.tensor([1e-40], dtype=ag.float32)
    assert tiny.item() != 0.0  # denormals stay


def test_rng_state_round_trips_and_seeds() -> None:
    state = ag.get_rng_state()
    assert isinstance(state, ag.ByteTensor)
    a = ag.rand(5)
    ag.set_rng_state(state)
    assert ag.equal(ag.rand(5), a)
    with pytest.raises(TypeError, match=r"expected a torch\.ByteTensor"):
        ag.set_rng_state(ag.zeros(3))
    with pytest.raises(RuntimeError, match="not a state from get_rng_state"):
        ag.set_rng_state(ag.zeros(3, dtype=ag.uint8))
    s = ag.seed()
    assert ag.initial_seed() == s
    first = ag.rand(3)
    ag.manual_seed(s)
    assert ag.equal(ag.rand(3), first)
    ag.manual_seed(11)
    assert ag.initial_seed() == 11


def test_set_printoptions_changes_repr() -> None:
    x = ag.tensor([1.234567, 2.5])
    t = torch.tensor([1.234567, 2.5])
    try:
        for kwargs in ({"precision": 2}, {"precision": 6}, {"profile": "short"}):
            ag.set_printoptions(**kwargs)
            torch.set_printoptions(**kwargs)
            assert repr(x) == repr(t)
        ag.set_printoptions(threshold=5, edgeitems=2)
        torch.set_printoptions(threshold=5, edgeitems=2)
        assert repr(ag.arange(10)) == repr(torch.arange(10))
        ag.set_printoptions(profile="full")
        assert "..." not in repr(ag.arange(2000))
    finally:
        ag.set_printoptions(profile="default")
        torch.set_printoptions(profile="default")
    assert repr(x) == repr(t)
    assert "..." in repr(ag.arange(2000))
    with pytest.raises(ValueError, match="Invalid profile"):
        ag.set_printoptions(profile="long")


def test_anomaly_build_facts_device_modules_and_errors() -> None:
    assert ag.is_anomaly_enabled() is torch.is_anomaly_enabled() is False
    ag.set_anomaly_enabled(True, check_nan=False)
    try:
        assert ag.is_anomaly_enabled()
        assert not ag.is_anomaly_check_nan_enabled()
        assert ag.autograd.anomaly_mode.is_anomaly_enabled()
    finally:
        ag.set_anomaly_enabled(False)
    assert not ag.is_anomaly_enabled()
    assert ag.has_lapack
    assert ag.has_spectral
    assert ag.has_mkl is False
    assert ag.has_openmp is False
    assert ag.get_device_module("cuda") is ag.cuda
    assert ag.get_device_module("cpu") is ag.cpu
    assert ag.get_device_module(ag.device("cuda:0")) is ag.cuda
    assert ag.cpu.is_available()
    assert ag.cpu.device_count() == 1
    assert ag.get_device_module() is (ag.cuda if ag.cuda.is_available() else ag.cpu)
    with pytest.raises(RuntimeError, match="does not have a corresponding module"):
        ag.get_device_module("xpu")
    for name in ("OutOfMemoryError", "AcceleratorError", "FatalError"):
        ours, theirs = getattr(ag, name), getattr(torch, name)
        assert [c.__name__ for c in ours.__mro__[1:]] == [c.__name__ for c in theirs.__mro__[1:]]


# ----- autocast and GradScaler -----
@pytest.mark.parametrize("device_type", ["cpu", "cuda"])
def test_autocast_records_its_region_and_changes_no_dtype(device_type: str) -> None:
    assert ag.is_autocast_enabled(device_type) is torch.is_autocast_enabled(device_type) is False
    x = ag.ones(2, 2)
    with ag.autocast(device_type) as ctx:
        assert ag.is_autocast_enabled(device_type)
        assert ctx.fast_dtype == ag.float16
        assert (x @ x).dtype == ag.float32
        with ag.autocast(device_type, enabled=False):
            assert not ag.is_autocast_enabled(device_type)
        assert ag.is_autocast_enabled(device_type)
    assert not ag.is_autocast_enabled(device_type)
    assert ag.is_autocast_enabled() is False

    @ag.autocast(device_type, dtype=ag.float64)
    def inside() -> tuple[bool, Any]:
        return ag.is_autocast_enabled(device_type), ag.get_autocast_dtype(device_type)

    assert inside() == (True, ag.float64)
    with pytest.raises(RuntimeError, match="Expected one of cpu, cuda"):
        ag.autocast("gpu")
    with pytest.raises(RuntimeError, match="Expected one of cpu, cuda"):
        torch.autocast("gpu")
    with ag.amp.autocast("cpu"):
        assert ag.is_autocast_cpu_enabled()
    assert ag.get_autocast_cpu_dtype() == ag.float16


def test_grad_scaler_disabled_passes_through() -> None:
    w = ag.nn.Parameter(ag.ones(2))
    opt = ag.optim.SGD([w], lr=0.5)
    s = ag.GradScaler("cpu", enabled=False)
    assert ag.amp.GradScaler is ag.GradScaler
    loss = (w * 2).sum()
    assert s.scale(loss) is loss
    loss.backward()
    s.step(opt)
    s.update()
    assert w.tolist() == [0.0, 0.0]
    assert s.get_scale() == torch.amp.GradScaler("cpu", enabled=False).get_scale() == 1.0
    assert s.state_dict() == {}
    assert not s.is_enabled()


def test_grad_scaler_matches_torchs_on_cpu() -> None:
    w = ag.nn.Parameter(ag.tensor([1.0, -2.0], dtype=ag.float64))
    tw = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    opt, topt = ag.optim.SGD([w], lr=0.1), torch.optim.SGD([tw], lr=0.1)
    s = ag.GradScaler("cpu", init_scale=4.0, growth_interval=2)
    ts = torch.amp.GradScaler("cpu", init_scale=4.0, growth_interval=2)
    for step in range(6):
        blow = step == 3  # an inf gradient: the step is skipped and the scale backs off
        for _lib, p, o, sc in ((ag, w, opt, s), (torch, tw, topt, ts)):
            o.zero_grad()
            loss = (p * p).sum() * (float("inf") if blow else 1.0)
            sc.scale(loss).backward()
            sc.step(o)
            sc.update()
        assert s.get_scale() == ts.get_scale()
        np.testing.assert_allclose(w.detach().numpy(), tw.detach().numpy(), rtol=1e-12)
    sd, tsd = s.state_dict(), ts.state_dict()
    assert sd == tsd
    (w.sum() * 1.0).backward()
    s.unscale_(opt)
    with pytest.raises(RuntimeError, match=r"unscale_\(\) has already been called"):
        s.unscale_(opt)


# ----- generic streams and events, the default generator -----
def test_cpu_streams_and_events_as_torchs() -> None:
    s, ts = ag.Stream("cpu"), torch.Stream(device="cpu")
    assert repr(s) == repr(ts)
    assert s.query() is ts.query() is True
    s.synchronize()
    e, te = ag.Event("cpu"), torch.Event(device="cpu")
    assert repr(e) == repr(te)
    assert e.query() is te.query() is True
    e.synchronize()
    e.wait()
    s.wait_event(e)
    for ours, theirs in (
        (lambda: s.record_event(), lambda: ts.record_event()),
        (lambda: e.record(), lambda: te.record()),
        (lambda: s.wait_stream(ag.Stream("cpu")), lambda: ts.wait_stream(torch.Stream("cpu"))),
    ):
        with pytest.raises(RuntimeError, match="cpu backend doesn't support events"):
            theirs()
        with pytest.raises(RuntimeError, match="cpu backend doesn't support events"):
            ours()
    assert s == ag.Stream("cpu")
    assert s.device == ag.device("cpu")


def test_streams_on_a_cuda_device_are_cuda_streams() -> None:
    if not ag.cuda.is_available():
        pytest.skip("needs a (simulated) CUDA device")
    s = ag.Stream()
    assert isinstance(s, ag.cuda.Stream)
    assert s.device == ag.device("cuda:0")
    e = ag.Event("cuda")
    e.record(s)
    e.synchronize()
    assert e.query()
    assert isinstance(ag.Stream("cuda:1"), ag.cuda.Stream)


def test_default_generator_is_the_one_manual_seed_seeds() -> None:
    ag.manual_seed(5)
    a = ag.rand(3, generator=ag.default_generator)
    ag.default_generator.manual_seed(5)
    assert ag.equal(ag.rand(3), a)


def test_default_convert_and_unbatched_loading_as_torchs() -> None:
    samples = [(np.zeros(2), 1), {"a": np.int64(3)}, "s", np.array(["a"]), [np.ones(1)]]
    for s in samples:
        ours, theirs = ag.utils.data.default_convert(s), torch.utils.data.default_convert(s)
        assert type(ours).__name__ == type(theirs).__name__
        if isinstance(theirs, list):
            assert [type(x).__name__ for x in ours] == [type(x).__name__ for x in theirs]
    ds = ag.utils.data.TensorDataset(ag.arange(3))
    tds = torch.utils.data.TensorDataset(torch.arange(3))
    ours = next(iter(ag.utils.data.DataLoader(ds, batch_size=None)))
    theirs = next(iter(torch.utils.data.DataLoader(tds, batch_size=None)))
    assert type(ours) is type(theirs) is list
    assert ours[0].item() == theirs[0].item() == 0


def _signature(f: Any) -> list[tuple[Any, ...]]:
    import inspect

    return [(p.name, p.kind, p.default) for p in inspect.signature(f).parameters.values()]


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        ("utils.data.DataLoader.__init__", "utils.data.DataLoader.__init__"),
        ("utils.data.RandomSampler.__init__", "utils.data.RandomSampler.__init__"),
        ("utils.data.WeightedRandomSampler.__init__", "utils.data.WeightedRandomSampler.__init__"),
        ("utils.data.BatchSampler.__init__", "utils.data.BatchSampler.__init__"),
        ("utils.data.DistributedSampler.__init__", "utils.data.DistributedSampler.__init__"),
        ("utils.data.SubsetRandomSampler.__init__", "utils.data.SubsetRandomSampler.__init__"),
        ("autocast.__init__", "autocast.__init__"),
        ("GradScaler.__init__", "amp.GradScaler.__init__"),
        ("nn.DataParallel.__init__", "nn.DataParallel.__init__"),
        ("nn.init.trunc_normal_", "nn.init.trunc_normal_"),
        ("nn.init.dirac_", "nn.init.dirac_"),
        ("nn.init.orthogonal_", "nn.init.orthogonal_"),
        ("nn.init.sparse_", "nn.init.sparse_"),
        ("set_printoptions", "set_printoptions"),
        ("use_deterministic_algorithms", "use_deterministic_algorithms"),
        ("accelerator.current_accelerator", "accelerator.current_accelerator"),
    ],
)
def test_signatures_are_torchs(ours: str, theirs: str) -> None:
    import functools

    def resolve(root: Any, path: str) -> Any:
        return functools.reduce(getattr, path.split("."), root)

    assert _signature(resolve(ag, ours)) == _signature(resolve(torch, theirs))
