import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

# --kernel auto calibrates once per machine and caches the choice: keep the tests' cache
# out of the user's home, shared by the whole session (subprocesses inherit it)
os.environ.setdefault("GEMVBW_CACHE_DIR", tempfile.mkdtemp(prefix="gemvbw-test-cache-"))


ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def load_script():
    """A script of the repository that is no package (benchmarks/, tools/), loaded as a module by its path,
    with its folder on sys.path as when it runs (the scripts import their neighbours, e.g. flush_option)."""
    def load(relative: str, name: str):
        folder = str((ROOT / relative).parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        spec = importlib.util.spec_from_file_location(name, ROOT / relative)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # as an import would: dataclasses look their module up there
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(autouse=True)
def _restore_affinity():
    """--cpus pins the whole process (as taskset does). Tests that invoke the CLI in-process
    (the fuzz test draws --cpus 0) would otherwise leave pytest, and every subprocess it starts
    later, on one CPU: tests that count the allowed CPUs would then depend on test order."""
    before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    yield
    if before is not None and os.sched_getaffinity(0) != before:
        os.sched_setaffinity(0, before)


@pytest.fixture
def broken_w4_kernel():
    """A w4 f32 variant named 'broken' that writes ones: it fails verification wherever it is asked for."""
    from gemvbw import kernels

    def bind(qm):
        def ones(x, y):
            y[:] = 1.0

        return ones

    kernels.register(kernels.KernelSpec(4, "f32", "broken", "ones", bind))
    yield "broken"
    kernels.unregister(4, "f32", "broken")


def off_at_y0(good, variant: str):
    """A spec named ``variant`` that runs ``good`` and then adds 1 to y[0], sharing its activations: close to
    right, but off the reference. Not registered."""
    from gemvbw import kernels

    def bind(qm):
        run = good.bind(qm)

        def off_by_some(x, y):
            run(x, y)
            y[0] += 1.0
        return off_by_some

    return kernels.KernelSpec(good.bits, good.act, variant, "y[0] off", bind, activations=good.activations)


@pytest.fixture
def wrong_i8_w4():
    """(good, bad): the first w4 int8 variant this CPU runs, and off_at_y0 of it named 'wrong'."""
    from gemvbw import kernels

    good = kernels.variants(4, "i8")[0]
    return good, off_at_y0(good, "wrong")


@pytest.fixture
def spec_off_at_y0():
    """off_at_y0, for a test to build its own wrong spec from a good one."""
    return off_at_y0


# The emulated aarch64 stage (.ci/arm64) runs three QEMU CPU models side by side on two cores, where compiling
# a kernel takes minutes and dominates. There each kernel's own tests (those parametrized by "spec") run under
# one model only: an int8 tier's under the oldest model that has it, the f32 loops' under max. Every model still
# runs every tier it has, verified against the reference, in tests/test_emulated.py's sweeps.
EMULATED_KERNEL_TESTS = {"neon": "cortex-a53", "neon-dotprod": "cortex-a76", None: "max"}


def pytest_collection_modifyitems(config, items):
    cpu = os.environ.get("GEMVBW_EMULATED_CPU")
    if cpu is None:
        return
    for item in items:
        spec = getattr(item, "callspec", None) and item.callspec.params.get("spec")
        owner = EMULATED_KERNEL_TESTS.get(getattr(spec, "tier", None), "max") if spec is not None else None
        if owner is not None and owner != cpu:
            item.add_marker(pytest.mark.skip(
                reason=f"emulated: {spec.variant}'s own tests run under QEMU_CPU={owner}; here it is verified "
                       "in test_emulated.py's sweeps"))
