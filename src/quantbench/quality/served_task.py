"""The fine-tune's task scored through a served endpoint by lm-evaluation-harness.

The evaluate stage answers the held-out questions offline, on the variant's weights. What a user
deploys is a server: its chat template, its sampling, its kernels, its batching. Here EleutherAI's
lm-evaluation-harness (``lm_eval``, the field's harness; AIPerf and InferenceX run it beside their
load tests) asks the same questions through the server's OpenAI-compatible chat endpoint
(its ``local-chat-completions`` model), greedy, with the offline run's answer length, and judges
each answer with the same rule (:meth:`quantbench.qa.QAItem.is_correct`). The task is defined here
over the shipped file, so nothing comes from a hub. Standard lm-eval tasks named in params
(``hellaswag``, ``gsm8k``) run the same way where their data is on disk
(:func:`standard_task_problems` says before any work when it is not).

Question by question against the offline answers (:func:`agreement`), an exact McNemar test says
whether the server answers the task as the weights do: a pair that differs beyond noise is flagged
and never recommended.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

from quantbench.qa import QAItem
from quantbench.quality.compare import mcnemar, wilson
from quantbench.schemas.bench import HELDOUT_TASK, TaskAgreement, TaskScore
from quantbench.schemas.common import HeldoutAnswer

log = logging.getLogger(__name__)

TASK_NAME = HELDOUT_TASK


def heldout_task(items: Sequence[QAItem], max_new_tokens: int) -> dict[str, Any]:
    """An lm-eval task config over the held-out items: generation until the model stops (no
    stop strings, as offline), judged by the accept strings."""
    import datasets

    by_question = {item.question: item for item in items}

    def dataset(**_: Any) -> dict[str, Any]:
        rows = [
            {"question": i.question, "answer": i.answer, "accept": list(i.accept)} for i in items
        ]
        return {"test": datasets.Dataset.from_list(rows)}

    def process_results(doc: dict[str, Any], results: list[str]) -> dict[str, float]:
        return {"acc": float(by_question[doc["question"]].is_correct(results[0]))}

    return {
        "task": TASK_NAME,
        "custom_dataset": dataset,
        "test_split": "test",
        "output_type": "generate_until",
        "doc_to_text": "{{question}}",
        "doc_to_target": "{{answer}}",
        "process_results": process_results,
        "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}],
        "generation_kwargs": {
            "until": [],
            "max_gen_toks": max_new_tokens,
            "do_sample": False,
            "temperature": 0.0,
        },
        "num_fewshot": 0,
        "metadata": {"version": 1},
    }


def _offline_env() -> None:
    # no hub, ever: a standard task without its data on disk must fail, not download
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ.setdefault(name, "1")


def standard_task_problems(names: Sequence[str]) -> list[str]:
    """Every named lm-eval task that is unknown, or whose data does not load offline, each
    with its fix. The validate stage calls this before any work (indexing lm-eval's 14,000
    task files takes about 20 s on 2 cores: only where standard tasks are named)."""
    if not names:
        return []
    _offline_env()
    from lm_eval.tasks import TaskManager

    manager = TaskManager()
    unknown = [n for n in names if n not in manager.all_tasks]
    found = []
    if unknown:
        found.append(
            f"served_task.standard_tasks names {unknown}, which lm-evaluation-harness does not "
            "know (`lm-eval ls tasks` lists them); fix the names or remove them"
        )
    for name in names:
        if name in unknown:
            continue
        try:
            loaded = manager.load([name])
        except Exception as exc:  # lm-eval raises whatever datasets raises
            found.append(
                f"served_task.standard_tasks: task {name!r} cannot load its data offline "
                f"({type(exc).__name__}: {str(exc)[:200]}); this run reaches no hub: put the "
                "dataset in the Hugging Face datasets cache (HF_DATASETS_CACHE) on this machine, "
                "or remove the task"
            )
            continue
        for task in loaded["tasks"].values():
            missing = missing_metric_modules(task)
            if missing:
                found.append(
                    f"served_task.standard_tasks: task {name!r} computes its metrics with "
                    f"{', '.join(missing)}, which is not installed in .venv (scikit-learn is "
                    "left out on purpose: requirements.txt says why); install it with "
                    "`.venv/bin/uv pip install --python .venv/bin/python scikit-learn==1.9.1`, "
                    "or remove the task"
                )
    return found


_IMPORT = re.compile(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", re.MULTILINE)


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def missing_metric_modules(task: Any, installed: Callable[[str], bool] = _installed) -> list[str]:
    """The top-level modules that a loaded lm-eval task's metric and aggregation functions import
    inside their bodies and that this environment lacks, sorted. lm-eval imports scikit-learn
    only there (its ``f1`` and ``matthews_corrcoef`` aggregations, ``weighted_f1_score``), so a
    task that needs it would otherwise fail at its first score, after every server ran."""
    functions = [*task.aggregation().values(), *getattr(task, "_metric_fn_list", {}).values()]
    missing: set[str] = set()
    for fn in functions:
        try:
            source = inspect.getsource(fn)
        except (OSError, TypeError):  # a builtin or a C function imports nothing of Python's
            continue
        missing.update(m for m in _IMPORT.findall(source) if not installed(m))
    return sorted(missing)


def score_endpoint(
    base_url: str,
    model: str,
    items: Sequence[QAItem],
    max_new_tokens: int,
    *,
    standard_tasks: Sequence[str] = (),
    concurrency: int = 1,
    timeout_s: float = 300.0,
    confidence: float = 0.95,
) -> list[TaskScore]:
    """Score the held-out task (and any standard tasks) through the chat endpoint at
    ``base_url`` (``http://host:port``) serving ``model``; the held-out task first."""
    _offline_env()
    from lm_eval.tasks import TaskManager

    model_args: dict[str, Any] = {
        "base_url": f"{base_url}/v1/chat/completions",
        "model": model,
        "num_concurrent": concurrency,
        "max_retries": 1,
        "timeout": int(timeout_s),
        "tokenized_requests": False,
        "tokenizer_backend": None,
    }
    tasks: list[Any] = [heldout_task(items, max_new_tokens), *standard_tasks]
    # lm-eval's evaluate(), not simple_evaluate(): the latter also seeds torch and records the
    # environment (torch's collect_env, a transformers import): 8-13 s a pair on 2 cores, for
    # nothing a server-side greedy answer depends on. What it sets for tasks is set here.
    from lm_eval.evaluator import evaluate

    loaded = TaskManager(include_defaults=bool(standard_tasks)).load(tasks)
    for task in loaded["tasks"].values():
        if task.get_config("num_fewshot") is None:
            task.set_config(key="num_fewshot", value=0)
        task.set_fewshot_seed(seed=1234)  # lm-eval's default: standard tasks' shots as theirs
    out = evaluate(
        lm=_chat_endpoint(model_args),
        task_dict=loaded,
        bootstrap_iters=0,
        log_samples=True,
        apply_chat_template=True,
        fewshot_as_multiturn=True,
        verbosity="WARNING",
    )
    if out is None:
        raise RuntimeError("lm-evaluation-harness returned no results")
    scores = [_heldout_score(out["samples"][TASK_NAME], items, confidence)]
    for name in standard_tasks:
        scores.append(_standard_score(name, out["results"].get(name, {}), out["samples"]))
    return scores


def _chat_endpoint(model_args: dict[str, Any]) -> Any:
    """lm-eval's ``local-chat-completions`` model, sending no ``stop`` where there is none:
    it sends ``"stop": []``, which `transformers serve` answers with HTTP 500 (its stop-string
    preprocessing finds no tokens to match)."""
    from lm_eval.models.openai_completions import LocalChatCompletion

    class ChatEndpoint(LocalChatCompletion):  # type: ignore[misc]
        def _create_payload(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            payload = dict(super()._create_payload(*args, **kwargs))
            if not payload.get("stop"):
                payload.pop("stop", None)
            return payload

    return ChatEndpoint(**model_args)


def _heldout_score(
    samples: list[dict[str, Any]], items: Sequence[QAItem], confidence: float
) -> TaskScore:
    by_id = sorted(samples, key=lambda s: int(s["doc_id"]))
    if len(by_id) != len(items):
        raise RuntimeError(f"lm-eval scored {len(by_id)} of {len(items)} held-out questions")
    answers = []
    for item, sample in zip(items, by_id, strict=True):
        got = sample["filtered_resps"][0]
        got = got if isinstance(got, str) else str(got)
        answers.append(
            HeldoutAnswer(question=item.question, expected=item.answer, got=got.strip(),
                         ok=bool(sample["acc"]))
        )  # fmt: skip
    correct = sum(a.ok for a in answers)
    return TaskScore(
        task=TASK_NAME, metric="acc", correct=correct, total=len(answers),
        accuracy=correct / len(answers), interval=wilson(correct, len(answers), confidence),
        answers=answers,
    )  # fmt: skip


def _standard_score(name: str, result: dict[str, Any], samples: dict[str, Any]) -> TaskScore:
    metric = next((k for k in result if k.split(",")[0] in ("acc", "exact_match")), None)
    if metric is None:
        raise RuntimeError(f"lm-eval gave task {name!r} no acc or exact_match: {sorted(result)}")
    total = len(samples.get(name, []))
    value = float(result[metric])
    correct = round(value * total) if total else None
    return TaskScore(
        task=name, metric=metric.split(",")[0], correct=correct, total=total, accuracy=value,
        interval=None,
    )  # fmt: skip


def agreement(
    offline: Sequence[HeldoutAnswer], served: TaskScore, confidence: float
) -> TaskAgreement:
    """The served answers against the offline ones, question by question: exact McNemar on the
    questions one got right and the other wrong, Newcombe's interval on the difference (served
    minus offline); ``differs`` where the p-value is below 1 - confidence."""
    asked = [a.question for a in served.answers]
    if asked != [a.question for a in offline]:
        raise ValueError(
            f"the {len(asked)} questions served are not the {len(offline)} answered offline "
            "(the held-out file or evaluate.heldout_limit changed since the evaluate stage ran)"
        )
    m = mcnemar([a.ok for a in served.answers], [a.ok for a in offline], confidence)
    return TaskAgreement(
        served_only=m.a_only, offline_only=m.b_only, both=m.both, neither=m.neither,
        difference=m.difference, p_value=m.p_value, differs=m.p_value < 1 - confidence,
    )  # fmt: skip
