"""A variant's pass compares each scored row with the reference's file as it goes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from quantbench.quality import backends
from quantbench.quality.metrics import kl_rows
from quantbench.quality.windows import plan_windows
from quantbench.quality.worker import Reference, ScoreJob, run_job


class _Fixed:
    """Logits of one fixed random table, row i for position i (any ids)."""

    def __init__(self, vocab: int, seed: int) -> None:
        self.table = np.random.default_rng(seed).normal(size=(64, vocab)).astype(np.float32)

    def logits(self, ids):  # type: ignore[no-untyped-def]
        return self.table[: len(ids)]


@pytest.fixture
def fixed_backend(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    kinds = dict(backends._BACKENDS)
    monkeypatch.setattr(backends, "_BACKENDS", kinds)
    backends.register_backend(
        backends.BackendKind(
            "fixed", "a fixed table", lambda path, *a, **k: _Fixed(*map(int, path.name.split("-")))
        )
    )


def _job(
    tmp: Path, vocab: int, reference: Reference | None, out: Path | None, seed: int = 0
) -> ScoreJob:
    ids = [i % 5 for i in range(1, 41)]
    return ScoreJob(
        backend="fixed", path=tmp / f"{vocab}-{seed}", fmt="bf16", compute_dtype="float32", threads=1,
        n_ctx=16, ids=ids, windows=plan_windows(len(ids), 16, 16), logprob_path=out, prompts=[],
        max_new_tokens=1, stop_ids=frozenset({0}), reference=reference,
    )  # fmt: skip


def test_the_kl_is_the_rows_against_the_reference_file(fixed_backend, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ref_file = tmp_path / "ref.f32"
    ref = run_job(_job(tmp_path, 7, None, ref_file))
    assert ref.kl is None and ref_file.stat().st_size == len(ref.nll) * 7 * 4
    same = run_job(_job(tmp_path, 7, Reference(ref_file, 7), None))
    assert same.kl is not None and len(same.kl) == len(ref.nll) and not same.kl.any()
    # another model's rows: each KL is the definition's, from the two passes' log-probabilities
    var_file = tmp_path / "var.f32"
    run_job(_job(tmp_path, 7, None, var_file, seed=1))
    other = run_job(_job(tmp_path, 7, Reference(ref_file, 7), None, seed=1))
    want = kl_rows(*(np.fromfile(f, dtype=np.float32).reshape(-1, 7) for f in (ref_file, var_file)))
    assert other.kl is not None and other.kl.min() > 0
    np.testing.assert_array_equal(other.kl, want)


def test_another_vocabulary_gives_no_kl(fixed_backend, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ref_file = tmp_path / "ref.f32"
    run_job(_job(tmp_path, 7, None, ref_file))
    other = run_job(_job(tmp_path, 5, Reference(ref_file, 7), None))
    assert other.kl is None and other.vocab == 5  # the parent refuses it, naming both
