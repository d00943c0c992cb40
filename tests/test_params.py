"""Reading params.yaml: what YAML lets through silently is refused, with the fix."""

from __future__ import annotations

import pytest

from quantbench.params import ConfigError, parse_yaml, read_params, section


def test_a_key_written_twice_is_an_error_naming_both_lines() -> None:
    text = "slo: 'ttft:p95<=1s'\nruntime: {threads: 1}\nslo: 'ttft:p95<=9s'\n"
    with pytest.raises(ConfigError, match=r"'slo' is written twice \(lines 1 and 3\)"):
        parse_yaml(text)
    nested = "engines:\n  vllm:\n    threads: 1\n    threads: 2\n"
    with pytest.raises(ConfigError, match=r"'threads' is written twice \(lines 3 and 4\)"):
        parse_yaml(nested)


def test_an_empty_file_or_a_list_is_refused(tmp_path) -> None:
    with pytest.raises(ConfigError, match="is empty"):
        parse_yaml("")
    with pytest.raises(ConfigError, match="expected a mapping of sections, got list"):
        parse_yaml("- a\n- b\n")
    with pytest.raises(ConfigError, match="no such parameters file"):
        read_params(tmp_path / "missing.yaml")


def test_an_unquoted_on_is_named_with_the_fix() -> None:
    from quantbench.engines.llamacpp import LlamaCppSettings

    raw = parse_yaml("engines:\n  llamacpp:\n    flash_attn: on\n")
    with pytest.raises(ConfigError) as err:
        section(raw, "engines.llamacpp", LlamaCppSettings)
    text = str(err.value)
    assert "engines.llamacpp.flash_attn: got True" in text
    assert "YAML reads an unquoted on / yes / true as true: quote the word" in text


def test_union_tags_stay_out_of_the_key() -> None:
    from quantbench.workloads.spec import WorkloadSpec

    raw = {"workload": {"prompts": {"source": "random", "input_len": 4, "output_len": 4},
                        "load": [{"kind": "concurrency", "concurrency": 1, "label": "a/b"}],
                        "num_requests": 2}}  # fmt: skip
    with pytest.raises(ConfigError, match=r"workload\.load\.0\.label: got 'a/b'"):
        section(raw, "workload", WorkloadSpec)


def test_plugins_must_exist(tmp_path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text("plugins: [nowhere/plugin.py]\n")
    with pytest.raises(ConfigError, match="plugins: nowhere/plugin.py does not exist"):
        read_params(path)


def test_a_child_process_imports_the_plugins_its_parent_loaded(tmp_path) -> None:
    """The evaluate stage's worker process loads a plugin format's checkpoint by the format's own
    code: it imports what the parent imported (loaded_plugins), a relative file by its absolute
    path, whatever its working directory."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins/fp16_format.py").write_text(
        (repo / "tests/formats/fp16_plugin.py").read_text()
    )
    parent = (
        "from pathlib import Path; from quantbench.params import import_plugins, loaded_plugins\n"
        f"import_plugins(['plugins/fp16_format.py'], base=Path({str(tmp_path)!r}))\n"
        "print(repr(loaded_plugins()))"
    )
    done = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.strip()
    assert loaded == repr((str((tmp_path / "plugins/fp16_format.py").resolve()),))
    child = (
        "from quantbench.params import import_plugins\n"
        "from quantbench.formats.registry import get_format\n"
        f"import_plugins(list({loaded})); print(get_format('fp16').name)"
    )
    done = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, cwd=repo / "docs"
    )
    assert done.returncode == 0 and done.stdout.strip() == "fp16", done.stderr


# --- YAML that attacks the parser, and text YAML refuses: a message, never a traceback ---------


def test_nesting_past_the_limit_is_refused_before_anything_is_built() -> None:
    """Deep flow nesting made the composer recurse until Python's stack ran out (a
    RecursionError traceback); block nesting likewise. Both are refused with the line."""
    from quantbench.params import MAX_DEPTH

    deep = "runtime: " + "[" * 20_000 + "]" * 20_000 + "\n"
    with pytest.raises(ConfigError, match=rf"line 1 is nested more than {MAX_DEPTH} levels"):
        parse_yaml(deep)
    block = "".join("  " * i + f"k{i}:\n" for i in range(MAX_DEPTH + 5))
    with pytest.raises(ConfigError, match="nested more than"):
        parse_yaml(block)
    ok = "".join("  " * i + f"k{i}:\n" for i in range(10)) + "  " * 10 + "v: 1\n"
    assert parse_yaml(ok)["k0"]["k1"]


def test_aliases_that_expand_to_a_million_values_are_refused() -> None:
    """Six levels of ten aliases each: a million values once anything walks them (pydantic,
    json.dumps of dvc's params), accepted before."""
    text = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n" for p, n in zip("abcde", "bcdef", strict=True)
    )
    with pytest.raises(ConfigError, match="aliases expand to more than 100,000 values"):
        parse_yaml(text)
    shared = "defaults: &d {threads: 1, seed: 2}\nruntime: *d\nother: {<<: *d, seed: 3}\n"
    assert parse_yaml(shared)["other"] == {"threads": 1, "seed": 3}  # a merge key is fine


def test_a_tab_indented_line_is_named_with_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"line 2 is indented with a tab \('\\tthreads: 1'\).*"
                       r"replace each tab by spaces"):  # fmt: skip
        parse_yaml("runtime:\n\tthreads: 1\n")


def test_keys_that_are_not_names_and_numbers_too_long_are_messages() -> None:
    with pytest.raises(ConfigError, match=r"line 1: a key is a list \(\['a', 'b'\]\)"):
        parse_yaml("? [a, b]\n: 1\n")
    with pytest.raises(ConfigError, match="a value YAML cannot read"):
        parse_yaml("seed: " + "9" * 5000 + "\n")


def test_a_value_is_shown_as_python_writes_it_and_cut_when_long() -> None:
    from quantbench.runtime import RuntimeSettings

    raw = parse_yaml('runtime: {device: "cpu\\n"}\n')
    with pytest.raises(ConfigError, match=r"runtime\.device: got 'cpu\\n'"):
        section(raw, "runtime", RuntimeSettings)
    raw = parse_yaml("runtime: {device: " + "x" * 5000 + "}\n")
    with pytest.raises(ConfigError) as err:
        section(raw, "runtime", RuntimeSettings)
    assert len(str(err.value)) < 600 and "xxx..." in str(err.value)


def test_a_union_tag_is_named_as_its_key_with_the_yaml_hint() -> None:
    """`kind: off` in a load point reached the user as pydantic's "Input tag 'False' found using
    'kind'" under the point's key, the value of the whole point shown as {...}."""
    from quantbench.workloads.spec import WorkloadSpec

    raw = parse_yaml("workload: {use: chat, load: [{kind: off, concurrency: 1}]}\n")
    with pytest.raises(ConfigError) as err:
        section(raw, "workload", WorkloadSpec)
    text = str(err.value)
    assert "workload.load.0.kind: got False; allowed: 'concurrency', 'rate'" in text
    assert "quote the word" in text
