"""The rules every settings model holds (quantbench.settings): numbers are numbers, text has no
control characters, a lower bound is not above its upper, labels carry no markup. Checked on
every numeric and text field of every section, not on a few examples."""

from __future__ import annotations

import math
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from quantbench.settings import Settings, label_problem, value_problem


def _models() -> list[type[BaseModel]]:
    """Every settings model the whole params file is made of (plugins' aside)."""
    import quantbench.config
    from quantbench.engines.registry import engine_names, get_engine
    from quantbench.formats.registry import format_names, get_format

    found: dict[str, type[BaseModel]] = {}
    todo: list[type[BaseModel]] = [quantbench.config.Config]
    todo += [get_engine(n).settings_model for n in engine_names()]
    todo += [get_format(f).recipe_model for f in format_names()]
    while todo:
        model = todo.pop()
        if model.__qualname__ in found:
            continue
        found[model.__qualname__] = model
        for field in model.model_fields.values():
            stack = [field.annotation]
            while stack:
                t = stack.pop()
                if isinstance(t, type) and issubclass(t, BaseModel):
                    todo.append(t)
                stack += list(typing.get_args(t))
    return list(found.values())


def _fields(kind: str) -> list[tuple[str, typing.Any, str]]:
    from quantbench.settings import _bounds, _is_number, _members

    out = []
    for model in _models():
        for name, field in model.model_fields.items():
            members = _members(field.annotation)
            if kind == "number" and _is_number(members) and bool not in members:
                out.append((f"{model.__name__}.{name}", field.annotation, _bounds(field)))
            if kind == "text" and any(t is str or t is Path for t in members):
                out.append((f"{model.__name__}.{name}", field.annotation, ""))
    return out


def test_every_number_field_refuses_what_is_not_a_number() -> None:
    """A switch (YAML's on), a text pydantic would coerce ("5", and 1e309, which YAML reads as
    text and pydantic as infinity), NaN and infinity: each refused with the field's range."""
    numbers = _fields("number")
    assert len(numbers) >= 80, len(numbers)  # every section's counts, sizes, rates, shares
    accepted = []
    for where, annotation, bounds in numbers:
        for bad in (True, False, "5", "1e309", math.nan, math.inf, -math.inf):
            problem = value_problem(bad, annotation, bounds)
            if problem is None:
                accepted.append(f"{where} took {bad!r}")
            elif bounds and not isinstance(bad, float):
                assert bounds in problem, (where, problem)
    assert accepted == []


def test_every_text_field_refuses_a_control_character_and_shows_it() -> None:
    texts = _fields("text")
    assert len(texts) >= 25, len(texts)  # names, paths, labels of every section
    for where, annotation, _ in texts:
        for char in ("\n", "\t", "\x1b", "\x00", "\u202e", "\x85"):
            problem = value_problem(f"name{char}", annotation)
            assert problem is not None and repr(char) in problem, (where, char, problem)
        assert value_problem("a plain name/with.parts-1", annotation) is None, where


def test_yaml_numbers_and_switches_are_refused_through_the_model() -> None:
    from quantbench.engines.llamacpp import LlamaCppSettings

    with pytest.raises(ValidationError) as err:
        LlamaCppSettings.model_validate({"parallel": True, "threads": "2", "ctx_size": math.nan})
    errors = {e["loc"]: e["msg"] for e in err.value.errors()}
    assert "a switch where a whole number or 'auto' goes" in errors[("parallel",)]
    assert "a text where a whole number >= 1 goes" in errors[("threads",)]
    assert "not a finite number" in errors[("ctx_size",)]
    # a number is still a number, and a field that takes anything takes any value
    assert LlamaCppSettings(parallel=4, threads=2).parallel == 4
    from quantbench.workloads.spec import WorkloadSpec

    spec = WorkloadSpec(use="chat", request_fields={"stop": ["\n"], "temperature": 0})
    assert spec.request_fields["stop"] == ["\n"]


def test_a_lower_bound_above_its_upper_names_both_with_the_fix() -> None:
    """report.confirm's min_rounds above max_rounds was accepted; the precision's said neither
    value. Every section's min_X / max_X pair is held by one rule."""
    from quantbench.report.spec import ReportSettings
    from quantbench.workloads.spec import PrecisionSpec

    with pytest.raises(ValidationError, match="min_rounds 5 is above max_rounds 4; lower"):
        ReportSettings.model_validate({"confirm": {"min_rounds": 5, "max_rounds": 4}})
    with pytest.raises(ValidationError, match="min_requests 300 is above max_requests 200"):
        PrecisionSpec(min_requests=300)  # the upper is its default
    assert PrecisionSpec(min_requests=20, max_requests=20).min_requests == 20


def test_a_label_is_a_short_word_without_markup() -> None:
    from quantbench.bench.spec import BenchSettings

    for good in ("USD", "€", "CHF", "US$", "credits/h"):
        assert label_problem(good) is None, good
        assert BenchSettings(currency=good).currency == good
    for bad in ("<b>USD</b>", "", " USD", "a" * 17, "US|D", "<script>", "1 & 2"):
        assert label_problem(bad) is not None, bad
        with pytest.raises(ValidationError, match="a label is 1 to 16 letters"):
            BenchSettings(currency=bad)


def test_settings_stay_frozen_and_strict_about_keys() -> None:
    class Section(Settings):
        count: int = 1

    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        Section.model_validate({"cuont": 2})
    with pytest.raises(ValidationError):
        Section().count = 3  # type: ignore[misc]
