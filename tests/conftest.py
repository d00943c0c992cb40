"""Shared fixtures: a tiny random Llama with the real tokenizer (fast), the real embedded model (slow)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIRST = REPO / "tests" / "native"
E2E = REPO / "tests" / "report" / "test_pipeline_e2e.py"


PROFILE_ENV = "QUANTBENCH_TEST_PROFILE"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):  # type: ignore[no-untyped-def]
    """With $QUANTBENCH_TEST_PROFILE set to a file, append one JSON line per test: its wall
    seconds (setup, call and teardown) and the CPU seconds it used, its own and its finished
    children's (servers, load processes, DVC stages): what says which tests wait and which
    compute, for scheduling CI (docs/ARCHITECTURE.md, "Tests and CI")."""
    out = os.environ.get(PROFILE_ENV)
    if not out:
        yield
        return
    import json
    import resource
    import time

    def cpu() -> float:
        own = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    start, used = time.perf_counter(), cpu()
    yield
    line = {
        "test": item.nodeid,
        "wall_s": round(time.perf_counter() - start, 3),
        "cpu_s": round(cpu() - used, 3),
        "markers": sorted({m.name for m in item.iter_markers()}),
    }
    with open(out, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")


_UNTRACKED = pytest.StashKey[set | None]()


def pytest_sessionstart(session) -> None:  # type: ignore[no-untyped-def]
    """The untracked files before the run (tools/scratch_guard.py), in the controlling process."""
    if not hasattr(session.config, "workerinput"):
        from tools.scratch_guard import untracked

        session.config.stash[_UNTRACKED] = untracked(REPO)


def pytest_sessionfinish(session, exitstatus) -> None:  # type: ignore[no-untyped-def]
    """Fail the run that left files in the repository's tree that git neither tracks nor
    ignores: a test's scratch output belongs in its temporary folder."""
    if hasattr(session.config, "workerinput") or _UNTRACKED not in session.config.stash:
        return
    from tools.scratch_guard import left_behind, untracked

    new = left_behind(session.config.stash[_UNTRACKED], untracked(REPO))
    if new:
        shown = ", ".join(new[:20]) + (f" and {len(new) - 20} more" if len(new) > 20 else "")
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(
                f"the tests left files in the repository's tree: {shown} (write scratch output "
                "under tmp_path, or ignore the folder in .gitignore if it is a build output)",
                red=True,
            )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_collection_modifyitems(config, items) -> None:
    """The native-build checks first: a build that cannot run here fails in the first minute,
    before tests that would die on it much later (see tests/native/test_gguf_smoke.py). On
    several workers (pytest-xdist) the whole pipeline's run goes before them: it is the longest
    test by far, and started first, everything else fits beside it on the other worker."""
    workers = bool(os.environ.get("PYTEST_XDIST_WORKER"))

    def rank(item) -> int:  # type: ignore[no-untyped-def]
        path = Path(str(item.fspath))
        if workers and path == E2E:
            return 0
        return 1 if FIRST in path.parents else 2

    items.sort(key=rank)


@pytest.fixture(scope="session", autouse=True)
def compute_dtype_measured() -> str:
    """This machine's compute dtype, measured once per test process before any test (unless
    the environment already sets it): every test, and every process a test starts, computes in
    what the CPU runs fastest, as the pipeline does."""
    from quantbench.native import dtype as dt

    return dt.compute_dtype()


@pytest.fixture
def probed_dtype(monkeypatch):  # type: ignore[no-untyped-def]
    """Set what the compute-dtype probe answers for one test (``probed_dtype("float32")``: an
    AVX2-only CPU's answer), and forget it after the test, passed or failed: the probe's answer
    is cached per process, so a test that cleared it only on its last line left a failed test's
    answer to every later test of the worker."""
    from quantbench.native import dtype as dt

    def answer(name: str) -> None:
        dt.probe.cache_clear()
        monkeypatch.setenv(dt.ENV, name)

    yield answer
    dt.probe.cache_clear()


@pytest.fixture(autouse=True)
def compute_dtype_kept(compute_dtype_measured: str):  # type: ignore[no-untyped-def]
    """A test that changes the compute dtype for the tests after it fails: each later
    quantizer, evaluation and `native` server of the process would compute in it (a mocked
    probe once left bf16 behind, emulated on an AVX2-only EPYC: the worker's quantizers ran 2
    to 4 times slower, for the rest of the run)."""
    from quantbench.native import dtype as dt

    before = os.environ.get(dt.ENV)
    yield
    after = os.environ.get(dt.ENV)
    if after != before:
        os.environ[dt.ENV] = before or compute_dtype_measured  # for the next test
        dt.probe.cache_clear()
        pytest.fail(
            f"${dt.ENV} was {before!r} before this test and {after!r} after: a test "
            "that sets it (or mocks quantbench.native.dtype's probe) must restore it "
            "(monkeypatch.setenv, or setenv then delenv)"
        )


@pytest.fixture(scope="session")
def embedded_tokenizer():
    """The embedded model's tokenizer with its chat template, read from the shipped GGUF."""
    from quantbench.model import load_embedded_tokenizer

    return load_embedded_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, embedded_tokenizer) -> Path:
    """A 2-layer random Llama (GQA, gated MLP, tied embeddings) saved as a Hugging Face folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(embedded_tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=embedded_tokenizer.bos_token_id,
        eos_token_id=embedded_tokenizer.eos_token_id,
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    out = tmp_path_factory.mktemp("tiny") / "model"
    model.save_pretrained(out)
    embedded_tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def prepared_base(tmp_path_factory) -> Path:
    """The real embedded model prepared by the library (30-60 s), once per run on a machine
    (`quantbench.prepared_cache`: the first process prepares it into the machine's cache while
    the others wait); each test session gets its own copy."""
    import shutil

    from quantbench.prepared_cache import shared_prepared_base

    shared = shared_prepared_base()
    out = tmp_path_factory.mktemp("prepared") / "base"
    shutil.copytree(shared, out)
    return out


# the stand-in GPU (recorded nvidia-smi) every package's tests may ask for: fake_gpu, no_gpu
from tests.fake_gpu import fake_gpu, fake_gpu_factory, no_gpu  # noqa: E402, F401


@pytest.fixture(scope="session")
def fixture_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stage-output tree the decision's and the report's tests read (tests/report/conftest.py
    builds it), once a session."""
    from tests.report.conftest import build_fixture_tree

    return build_fixture_tree(tmp_path_factory.mktemp("report-tree"))
