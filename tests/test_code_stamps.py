"""The code stamps the validate stage writes for DVC: one per registered engine and format, each
the hash of the file that defines it, plugins' included; byte-identical while the code is."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from quantbench.schemas import io as schema_io
from quantbench.schemas.code import CodeStamp

REPO = Path(__file__).resolve().parents[1]
PLUGIN = REPO / "tests/formats/fp16_plugin.py"


def _stamp_in_child(project: Path, out: Path, plugins: list[str]) -> None:
    """Write the stamps in a fresh interpreter (the registries are process-wide)."""
    code = (
        "import sys; from pathlib import Path\n"
        "from quantbench.params import import_plugins\n"
        "from quantbench.code_stamps import write_code_stamps\n"
        f"import_plugins({plugins!r}, base=Path({str(project)!r}))\n"
        f"write_code_stamps(Path({str(out)!r}), Path({str(project)!r}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def _read(out: Path, kind: str, name: str) -> CodeStamp:
    return schema_io.read(out / kind / f"{name}.json", CodeStamp)


def test_every_builtin_engine_and_format_is_stamped_with_its_module_file(tmp_path: Path) -> None:
    out = tmp_path / "code"
    _stamp_in_child(REPO, out, [])
    from quantbench.engines.registry import BUILTIN as ENGINES
    from quantbench.formats.registry import BUILTIN as FORMATS

    for kind, table in (("engines", ENGINES), ("formats", FORMATS)):
        assert sorted(p.stem for p in (out / kind).iterdir()) == sorted(table)
        for name, module in table.items():
            stamp = _read(out, kind, name)
            file = "src/" + module.replace(".", "/") + ".py"
            assert (stamp.module, stamp.file, stamp.builtin) == (module, file, True)
            assert stamp.sha256 == hashlib.sha256((REPO / file).read_bytes()).hexdigest()


def test_a_plugin_is_stamped_and_only_its_stamp_follows_its_edits(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "plugins").mkdir(parents=True)
    plugin = project / "plugins/fp16_format.py"
    plugin.write_text(PLUGIN.read_text())
    first, second = tmp_path / "first", tmp_path / "second"
    _stamp_in_child(project, first, ["plugins/fp16_format.py"])
    stamp = _read(first, "formats", "fp16")
    assert stamp.file == "plugins/fp16_format.py" and not stamp.builtin
    assert stamp.sha256 == hashlib.sha256(plugin.read_bytes()).hexdigest()

    plugin.write_text(PLUGIN.read_text() + "\n# edited\n")
    _stamp_in_child(project, second, ["plugins/fp16_format.py"])
    changed = {
        path.relative_to(first).as_posix()
        for path in first.rglob("*.json")
        if path.read_bytes() != (second / path.relative_to(first)).read_bytes()
    }
    assert changed == {"formats/fp16.json"}  # what DVC sees: only the plugin's stages rerun


def test_stamps_are_rewritten_whole_so_a_dropped_plugin_leaves_none(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "plugins").mkdir(parents=True)
    (project / "plugins/fp16_format.py").write_text(PLUGIN.read_text())
    out = tmp_path / "code"
    _stamp_in_child(project, out, ["plugins/fp16_format.py"])
    assert (out / "formats/fp16.json").is_file()
    _stamp_in_child(project, out, [])
    assert not (out / "formats/fp16.json").exists()  # a stage still keyed by it fails on it
    assert (out / "formats/gptq.json").is_file()


def test_a_plugin_outside_the_project_is_stamped_by_its_absolute_path(tmp_path: Path) -> None:
    out = tmp_path / "code"
    _stamp_in_child(tmp_path / "elsewhere", out, [str(PLUGIN)])
    assert _read(out, "formats", "fp16").file == str(PLUGIN)
