"""The reference pass is computed once per run (quantbench.quality.refcache)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from quantbench.quality import refcache
from quantbench.quality.windows import plan_windows
from quantbench.quality.worker import ScoreJob, ScoreResult


def job(tmp: Path, ids: list[int], name: str = "ref.f32") -> ScoreJob:
    return ScoreJob(
        backend="hf", path=tmp / "merged", fmt="bf16", compute_dtype="float32", threads=2,
        n_ctx=64, ids=ids, windows=plan_windows(len(ids), 8, 4), logprob_path=tmp / name,
        prompts=[], max_new_tokens=8, stop_ids=frozenset({2}),
    )  # fmt: skip


def result(rows: int, vocab: int) -> ScoreResult:
    rng = np.random.default_rng(0)
    return ScoreResult(
        nll=rng.random(rows), top1=rng.integers(0, vocab, rows), vocab=vocab, generations=[],
        memory={"peak_rss_bytes": 1, "before_load_rss_bytes": 1, "after_load_rss_bytes": 1,
                "after_score_peak_rss_bytes": 1},
        timings={"load_s": 2.5, "score_s": 6.0, "heldout_s": 0.0},
    )  # fmt: skip


def test_a_pass_is_kept_and_read_back_by_the_next_evaluation(tmp_path: Path) -> None:
    ids = list(range(1, 21))
    first = job(tmp_path, ids)
    done = result(19, 7)
    first.logprob_path.write_bytes(np.arange(19 * 7, dtype=np.float32).tobytes())
    root = tmp_path / "cache"
    kept = refcache.store(first, "sha-merged", done, root)
    assert kept.parent.parent == root and not first.logprob_path.exists()  # moved, not copied
    later = job(tmp_path, ids, name="second.f32")  # another evaluation's own temp file
    got = refcache.load(later, "sha-merged", root)
    assert got is not None
    again, path = got
    assert np.array_equal(again.nll, done.nll) and again.vocab == 7
    assert path == kept and not later.logprob_path.exists()  # read where it lies
    assert path.read_bytes() == np.arange(19 * 7, dtype=np.float32).tobytes()
    assert again.timings == {"load_s": 0.0, "score_s": 0.0, "heldout_s": 0.0}  # spent nothing


def test_a_cache_that_cannot_be_written_leaves_the_pass_where_it_was(tmp_path: Path) -> None:
    first = job(tmp_path, list(range(1, 21)))
    first.logprob_path.write_bytes(np.zeros(19 * 7, dtype=np.float32).tobytes())
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    assert refcache.store(first, "sha", result(19, 7), blocked / "cache") == first.logprob_path
    assert first.logprob_path.stat().st_size == 19 * 7 * 4


def test_another_reference_or_other_ids_are_computed_again(tmp_path: Path) -> None:
    ids = list(range(1, 21))
    first = job(tmp_path, ids)
    first.logprob_path.write_bytes(np.zeros(19 * 7, dtype=np.float32).tobytes())
    root = tmp_path / "cache"
    refcache.store(first, "sha-merged", result(19, 7), root)
    assert refcache.load(job(tmp_path, ids), "sha-other-merge", root) is None
    assert refcache.load(job(tmp_path, [*ids, 5]), "sha-merged", root) is None


def test_a_torn_entry_is_computed_again_and_only_the_newest_is_kept(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    a = job(tmp_path, list(range(1, 21)))
    a.logprob_path.write_bytes(np.zeros(19 * 7, dtype=np.float32).tobytes())
    refcache.store(a, "sha-1", result(19, 7), root)
    (next(root.iterdir()) / "logprobs.f32").write_bytes(b"short")
    assert refcache.load(a, "sha-1", root) is None
    a.logprob_path.write_bytes(np.zeros(19 * 7, dtype=np.float32).tobytes())
    refcache.store(a, "sha-2", result(19, 7), root)
    assert [p.name for p in root.iterdir()] == [refcache.key(a, "sha-2")]
