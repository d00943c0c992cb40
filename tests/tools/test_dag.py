"""make check-dag: dvc.yaml's code dependencies are exactly each stage's import closure."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tools import dag

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(REPO / name, tmp_path / name)
    shutil.copytree(REPO / "stages", tmp_path / "stages")
    shutil.copytree(REPO / "src", tmp_path / "src", ignore=shutil.ignore_patterns("*.egg-info"))
    return tmp_path


def test_the_repository_passes() -> None:
    assert dag.check(REPO) == []


def test_a_deliberately_missing_dependency_fails(repo_copy: Path) -> None:
    dvc = repo_copy / "dvc.yaml"
    text = dvc.read_text()
    line = "      - reports/closures/finetune.json\n"
    assert line in text
    start = text.index("\n  finetune:")
    dvc.write_text(text[:start] + text[start:].replace(line, "", 1))
    problems = dag.check(repo_copy)
    assert "finetune: missing dependency reports/closures/finetune.json" in problems
    assert dag.main(["--check", "--repo", str(repo_copy)]) == 1


def test_a_module_listed_by_name_again_is_refused(repo_copy: Path) -> None:
    """The modules live in the stage's stamp: listed in dvc.yaml too, DVC would hash them twice
    and the lock would grow back to one entry per module."""
    dvc = repo_copy / "dvc.yaml"
    text = dvc.read_text()
    line = "      - reports/closures/finetune.json\n"
    dvc.write_text(text.replace(line, line + "      - src/quantbench/lora/spec.py\n", 1))
    assert "finetune: src/quantbench/lora/spec.py is listed but not imported by the stage" in (
        dag.check(repo_copy)
    )


def test_each_stage_depends_on_its_stamp_and_the_stamp_on_its_closure() -> None:
    """dvc.yaml lists a stage's script and its closure stamp, not its modules (3,007 `path:`
    entries in dvc.lock, which DVC reloads and rewrites whole at every stage's end); the stamp
    holds every module and template of the closure, by content."""
    import yaml

    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    assert stages["closures"]["deps"] == dag.CLOSURE_DEPS  # the one stage that reads src/ whole
    for name, stage in stages.items():
        if name == "closures":
            continue
        body = stage.get("do", stage)
        assert not [d for d in body.get("deps", []) if str(d).startswith("src/")], name
    finetune = stages["finetune"]["deps"]
    assert finetune[:2] == ["stages/finetune.py", "reports/closures/finetune.json"]
    quantize = dag.dvc_deps(REPO / "stages/quantize.py", {"formats"})
    assert "reports/closures/quantize@formats.json" in quantize
    assert "reports/code/formats/${item.format}.json" in quantize
    stamp = dag.closure_stamp(REPO / "stages/quantize.py", {"formats"})
    full = dag.code_deps(REPO / "stages/quantize.py", {"formats"})
    assert set(stamp["files"]) == {d for d in full if d.startswith("src/")}
    assert "src/quantbench/formats/compressor.py" in stamp["files"]  # shared by awq and w8a8
    assert "src/quantbench/formats/awq.py" not in stamp["files"]  # through its format's stamp
    assert "src/quantbench/formats/gptq.py" not in stamp["files"]  # through its format's stamp
    report = dag.closure_stamp(REPO / "stages/report.py", set())
    assert "src/quantbench/report/templates/report.js" in report["files"]


def test_an_edit_changes_exactly_the_stamps_of_the_closures_that_hold_it(repo_copy: Path) -> None:
    """The stamps follow the code alone (every script, each way a stage may run it): editing a
    module changes the bytes of the stamps whose closure holds it and of no other, so DVC reruns
    what it reran when it listed each module itself; writing them twice gives the same bytes."""
    before, again, after = (repo_copy / "reports" / n for n in ("a", "b", "c"))
    dag.write_stamps(before, repo_copy)
    dag.write_stamps(again, repo_copy)
    read = {p.name: p.read_bytes() for p in before.iterdir()}
    assert read == {p.name: p.read_bytes() for p in again.iterdir()}
    assert {"bench@engines.json", "quantize@formats.json", "report.json"} <= set(read)
    edited = repo_copy / "src/quantbench/report/tables.py"
    edited.write_text(edited.read_text() + "\n# edited\n")
    dag.write_stamps(after, repo_copy)
    changed = {p.name for p in after.iterdir() if p.read_bytes() != read[p.name]}
    holding = {
        p.name
        for p in before.iterdir()
        if "src/quantbench/report/tables.py" in json.loads(p.read_text())["files"]
    }
    assert changed == holding
    assert "report.json" in changed
    assert not changed & {"quantize@formats.json", "prepare.json", "finetune.json"}


def test_a_new_import_in_the_library_enters_the_stamp(repo_copy: Path) -> None:
    new = repo_copy / "src/quantbench/helper_for_test.py"
    new.write_text('"""A module a stage starts to import."""\n')
    model = repo_copy / "src/quantbench/model.py"
    before = dag.closure_stamp(repo_copy / "stages/prepare.py", set(), repo_copy)
    model.write_text(
        model.read_text() + "\n\ndef _later():\n    import quantbench.helper_for_test\n"
    )
    after = dag.closure_stamp(repo_copy / "stages/prepare.py", set(), repo_copy)
    assert "src/quantbench/helper_for_test.py" not in before["files"]
    assert "src/quantbench/helper_for_test.py" in after["files"]
    assert dag.check(repo_copy) == []  # dvc.yaml itself needs no rewrite


def test_the_closures_stage_is_checked(repo_copy: Path) -> None:
    dvc = repo_copy / "dvc.yaml"
    text = dvc.read_text()
    dvc.write_text(text.replace("      - src/quantbench\n", "", 1))
    assert any(p.startswith("closures: deps must be") for p in dag.check(repo_copy))
    dvc.write_text(text.replace("  closures:\n", "  closures_gone:\n", 1))
    assert any(p.startswith("closures: missing") for p in dag.check(repo_copy))


def test_a_literal_data_path_must_follow_its_setting(repo_copy: Path) -> None:
    dvc = repo_copy / "dvc.yaml"
    dvc.write_text(
        dvc.read_text().replace("      - ${data.train}\n", "      - data/train.jsonl\n", 2)
    )
    assert any("use ${data.train}" in p for p in dag.check(repo_copy))


def test_foreach_stages_depend_on_their_own_engine_or_format_stamp() -> None:
    """A keyed stage depends on its engine's or format's code stamp (which the validate stage
    writes for plugins too), not on a module path that a plugin does not have; and not on the
    plugins' folder, so editing one plugin reruns only its own stages."""
    deps = dag.code_deps(REPO / "stages/bench.py", {"engines"})
    assert "reports/code/engines/${item.engine}.json" in deps
    assert "src/quantbench/engines/vllm.py" not in deps  # only through the stamp
    assert "plugins" not in deps
    quantize = dag.code_deps(REPO / "stages/quantize.py", {"formats"})
    assert "reports/code/formats/${item.format}.json" in quantize
    assert not any(d.startswith("src/quantbench/estimate/") for d in quantize)
    assert "plugins" not in quantize
    assert not any("${item" in d for d in dag.code_deps(REPO / "stages/estimate.py", set()))


def test_stages_that_load_every_engine_or_format_depend_on_the_plugins_folder() -> None:
    """validate (which writes the stamps) and the estimate load every registered engine and
    format, plugins included: a plugin's edit reruns them; prepare loads none."""
    import yaml

    assert "plugins" in dag.code_deps(REPO / "stages/validate.py", set())
    assert "plugins" in dag.code_deps(REPO / "stages/estimate.py", set())
    assert "plugins" not in dag.code_deps(REPO / "stages/prepare.py", set())
    assert (REPO / "plugins").is_dir()  # a dependency DVC must find in every clone
    validate = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]["validate"]
    assert {"reports/code": {"cache": False}} in validate["outs"]


def test_each_bench_stage_depends_on_its_own_pair_entry() -> None:
    """A pair's own `settings:` change its server: editing them must rerun that pair's stage
    (and only it), as editing its engine's section does."""
    import yaml

    stage = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]["bench"]["do"]
    assert "bench.pairs.${key}" in stage["params"]
    assert "engines.${item.engine}" in stage["params"]


def test_the_estimate_depends_on_a_tracked_calibration_not_a_user_cache() -> None:
    """The measurement of `hardware: this` is the `calibrate` stage's output, which reruns when
    the machine's fingerprint changes; the estimate stage's code never reaches the user cache."""
    import yaml

    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    assert "reports/calibrate/this.json" in stages["estimate"]["deps"]
    assert {"reports/env.json", "models/base/config.json"} <= set(stages["calibrate"]["deps"])
    assert stages["calibrate"]["outs"] == [{"reports/calibrate/this.json": {"cache": False}}]
    source = (REPO / "stages/estimate.py").read_text()
    assert "calibration=" in source and "cache_dir" not in source


def test_the_first_stages_import_little() -> None:
    """prepare's closure used to be 56 modules (config.py imported every package's settings).

    Eleven (the one config.json reader, quantbench.hfconfig, and the one reader of a user's text
    files, quantbench.textfile, among them), plus the six small modules of its output's schema
    (quantbench.schemas, and quantbench.strict: the strict base the schemas and the statistics
    share, below both), plus the two of the accelerator's one probe (``quantbench.accelerator``:
    the stage resolves runtime.device, so that cuda on a machine without a GPU stops the run at
    its first stage)."""
    prepare = dag.code_deps(REPO / "stages/prepare.py", set())
    assert len(prepare) <= 19, prepare
    assert "src/quantbench/accelerator/nvidia.py" in prepare
    assert not any("/estimate/" in d or "/engines/" in d for d in prepare)


def test_a_module_the_formats_share_is_every_variants_dependency() -> None:
    """formats/awq.py and formats/w8a8.py both run llm-compressor through formats/compressor.py:
    a change there must rerun quantize@awq and quantize@w8a8, so it is listed by name; no format
    module imports another, so each is reached through its own template only."""
    quantize = dag.code_deps(REPO / "stages/quantize.py", {"formats"})
    assert "src/quantbench/formats/compressor.py" in quantize
    assert "reports/code/formats/${item.format}.json" in quantize
    for name in ("gptq", "gguf", "bf16", "awq", "w8a8", "rtn"):
        assert f"src/quantbench/formats/{name}.py" not in quantize
    assert dag.template_only("formats") == {
        "quantbench.formats.awq",
        "quantbench.formats.gguf",
        "quantbench.formats.gptq",
        "quantbench.formats.w8a8",
        "quantbench.formats.rtn",
        "quantbench.formats.bf16",
    }


def _internal_imports(package: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports anywhere (function bodies included; imports
    only for type checkers left out: they never run)."""
    import ast

    modules = {}
    for path in package.rglob("*.py"):
        rel = path.relative_to(package.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        modules[".".join(parts)] = path
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {
            id(sub)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for sub in ast.walk(node)
        }
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_package_has_no_import_cycles() -> None:
    # estimate.hardware <-> estimate.machine, and engines.base -> load.requests -> engines.registry
    # -> ... were cycles kept working only by imports deferred into function bodies.
    graph = _internal_imports(REPO / "src" / "quantbench")
    assert _cycles(graph) == []
    # the check is not blind: a cycle made on purpose is found (with the modules it runs through:
    # engines.base reaches load.requests through engines.registry too)
    graph["quantbench.load.requests"].add("quantbench.engines.base")
    planted = {"quantbench.engines.base", "quantbench.load.requests"}
    assert any(planted <= set(found) for found in _cycles(graph)), _cycles(graph)


def test_the_report_depends_on_the_templates_it_renders() -> None:
    """A change to the report's page, script or style left `dvc repro` doing nothing: the files a
    package reads at run time (its templates/) are a dependency of the stage that reads them."""
    deps = dag.code_deps(REPO / "stages/report.py", set(), REPO / "src")
    assert "src/quantbench/report/templates" in deps
    decide = dag.code_deps(REPO / "stages/decide.py", set(), REPO / "src")
    assert "src/quantbench/report/templates" not in decide  # it renders nothing


def test_a_stage_depends_on_the_programs_it_starts() -> None:
    """The bench stage runs its load through `python -m quantbench.load.runner`, which no module
    of its imports: a change to the runner, its dispatcher or its Locust user left `dvc repro`
    doing nothing. A module the code names to start as a program is a dependency too."""
    for stage in ("bench", "decide"):
        deps = dag.code_deps(REPO / f"stages/{stage}.py", set(), REPO / "src")
        for module in ("runner", "dispatch", "locustfile"):
            assert f"src/quantbench/load/{module}.py" in deps, (stage, module)
    # a string that names a module without a __main__ guard starts nothing
    assert not dag._runnable("quantbench.load.session", REPO / "src")
    assert dag._runnable("quantbench.load.runner", REPO / "src")


def _declared(body: dict) -> list[str]:
    """Every output path a stage declares (outs, metrics, plots), its templates as written."""
    found = []
    for key in ("outs", "metrics", "plots"):
        for entry in body.get(key) or []:
            found.append(next(iter(entry)) if isinstance(entry, dict) else str(entry))
    return found


def test_each_stage_output_schema_path_is_an_output_of_its_stage_in_dvc_yaml() -> None:
    """The schema's OUTPUT is the one place a stage output's path is written: dvc.yaml's stage
    (its STAGE) must declare that file, or a folder holding it, as its output."""
    import yaml

    from quantbench.schemas.catalog import STAGE_OUTPUTS

    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    for model in STAGE_OUTPUTS:
        stage = stages[model.STAGE.split("@")[0]]
        body = stage["do"] if "foreach" in stage else stage
        # a foreach stage's own key names the file ({name}, {pair}); any other field lies below
        path = model.OUTPUT.replace("{name}", "${key}") if "foreach" in stage else model.OUTPUT
        path = path.replace("{pair}", "${key}")
        fixed = re.split(r"(?<!\$)\{", path)[0].rstrip("/")  # up to a field not DVC's
        declared = _declared(body)
        assert any(
            path == out or fixed == out or fixed.startswith(out + "/") for out in declared
        ), f"{model.__name__}: {model.OUTPUT} is no output of stage {model.STAGE} ({declared})"


def test_stamps_replace_the_folder_whole(repo_copy: Path) -> None:
    """A stamp of a script removed since is gone, and an interrupted run's scratch folder (the
    stamps are written beside the folder, then renamed into place) is cleared first."""
    folder = repo_copy / "reports" / "closures"
    folder.mkdir(parents=True)
    (folder / "removed_stage.json").write_text("{}")
    scratch = repo_copy / "reports" / ".closures.tmp"
    scratch.mkdir()
    (scratch / "half_written.json").write_text("{")
    written = dag.write_stamps(folder, repo_copy)
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in written)
    assert "removed_stage.json" not in {p.name for p in written}
    assert not scratch.exists()
