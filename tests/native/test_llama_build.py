"""The pinned llama.cpp toolchain: one source release, its own converter and gguf-py."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from quantbench.accelerator import detect
from quantbench.machine_cache import CACHE_ENV
from quantbench.native import llama_build as llamacpp
from quantbench.native.isa import IsaReport


@pytest.fixture(autouse=True)
def _cpu_stack(no_gpu) -> None:
    """These tests are of the CPU build, whatever this machine has (a test of the CUDA build
    asks for the stand-in GPU, which shows it again)."""


def test_root_can_be_moved_by_environment(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv(llamacpp.ROOT_ENV, str(tmp_path))
    tc = llamacpp.toolchain()
    assert tc.root == tmp_path
    assert tc.converter == (
        tmp_path
        / "src"
        / "llama_cpp_python-0.3.36"
        / "vendor"
        / "llama.cpp"
        / "convert_hf_to_gguf.py"
    )
    assert tc.bin_dir == tmp_path / "cmake" / "bin"


def test_converter_uses_the_release_gguf_py(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NO_LOCAL_GGUF", "1")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = llamacpp.converter_env(llamacpp.toolchain(tmp_path))
    assert "NO_LOCAL_GGUF" not in env
    assert env["PYTHONPATH"].split(":")[0].endswith("vendor/llama.cpp/gguf-py")
    assert env["PYTHONPATH"].endswith("/elsewhere")


def test_a_foreign_llama_cpp_module_is_refused(tmp_path: Path) -> None:
    foreign = types.ModuleType("llama_cpp")
    foreign.__file__ = "/usr/lib/python3/site-packages/llama_cpp/__init__.py"
    foreign.__version__ = llamacpp.VERSION
    with pytest.raises(llamacpp.LlamaCppError, match="uninstall llama-cpp-python"):
        llamacpp._check_binding(foreign, llamacpp.toolchain(tmp_path))


@pytest.mark.slow
def test_bindings_load_the_pinned_build() -> None:
    module = llamacpp.load_binding()
    tc = llamacpp.toolchain()
    assert module.__version__ == llamacpp.VERSION
    assert tc.source.resolve() in Path(module.__file__).resolve().parents
    assert (tc.bin_dir / "libllama.so").is_file()
    assert tc.converter.is_file() and (tc.gguf_py / "gguf").is_dir()


@pytest.mark.slow
def test_the_build_compiles_two_folders_of_small_sources_as_one_unit_each() -> None:
    """llama-server links mtmd's 45 image and audio graph builders and common's 16 chat parsers,
    ~2 and ~6 s each to compile on an AVX2-only EPYC, nearly all of it the same headers: the
    build compiles each folder as one unit (llama_recipe.cmake), as llama.cpp does its models."""
    tc = llamacpp.ensure_built(("llama-server",))
    info = llamacpp.build_info(tc)
    assert info is not None and info["recipe"] == llamacpp.RECIPE
    included = f"-DCMAKE_PROJECT_INCLUDE={tc.root / llamacpp.RECIPE_FILE.name}"
    assert included in info["cmake_flags"], info["cmake_flags"]
    units = {
        "models": tc.build_dir / "tools/mtmd/CMakeFiles/mtmd.dir/Unity",
        "parsers": tc.build_dir / "common/CMakeFiles/llama-common.dir/Unity",
    }
    for folder, unity in units.items():
        text = (unity / f"unity_quantbench_{folder}_cxx.cxx").read_text()
        sources = [line.split('"')[1] for line in text.splitlines() if line.startswith("#include")]
        assert len(sources) >= 10, sources
        assert all(Path(s).parent.name == folder and s.endswith(".cpp") for s in sources), sources
        # each source is in the unit once, and compiled nowhere else
        assert len(set(sources)) == len(sources)
        objects = {p.name for p in unity.parent.rglob("*.o")}
        assert not any(Path(s).name + ".o" in objects for s in sources), objects & {
            Path(s).name + ".o" for s in sources
        }
    assert tc.binary("llama-server").is_file()


@pytest.mark.slow
def test_only_code_off_every_request_path_is_compiled_at_o1() -> None:
    """The code llama-server runs once or never for a text model (multimodal, argument parsing,
    presets, downloads, MCP) is compiled at -O1, 141 CPU seconds at -O3 down to 80; everything a
    request or a token runs through stays at the release's -O3."""
    tc = llamacpp.ensure_built(("llama-server",))
    commands = json.loads((tc.build_dir / "compile_commands.json").read_text())

    def level(name: str) -> str:
        [command] = [c["command"] for c in commands if c["file"].endswith(name)]
        return [flag for flag in command.split() if flag.startswith("-O")][-1]  # the last wins

    cold = ("common/arg.cpp", "common/preset.cpp", "common/download.cpp", "mtmd/clip.cpp",
            "mtmd/mtmd.cpp", "unity_quantbench_models_cxx.cxx", "server/server-mcp.cpp")  # fmt: skip
    hot = ("server/server-context.cpp", "server/server-http.cpp", "common/chat.cpp",
           "common/sampling.cpp", "src/llama-context.cpp", "ggml-cpu/ops.cpp",
           "vendor/cpp-httplib/httplib.cpp", "common/json-schema-to-grammar.cpp")  # fmt: skip
    assert {name: level(name) for name in cold} == dict.fromkeys(cold, "-O1")
    assert {name: level(name) for name in hot} == dict.fromkeys(hot, "-O3")


def _fake_build(root: Path, info: dict | None) -> llamacpp.Toolchain:
    tc = llamacpp.toolchain(root)
    tc.build_dir.mkdir(parents=True)
    (tc.build_dir / "CMakeCache.txt").write_text("")
    if info is not None:
        (tc.build_dir / llamacpp.BUILD_INFO).write_text(json.dumps(info))
    return tc


HERE = {"machine": "x86_64", "model": "AMD EPYC", "isa_flags": ["avx2", "avx512f"]}


def _info(cpu: dict | None = None, version: str = llamacpp.VERSION) -> dict:
    return {
        "version": version,
        "recipe": llamacpp.RECIPE,
        "base_flags": list(llamacpp.CMAKE_FLAGS),
        "cmake_flags": list(llamacpp.CMAKE_FLAGS),
        "cpu": cpu if cpu is not None else HERE,
        "isa": {"kept": [], "dropped": [], "native": [], "outcomes": {}, "disable_flags": []},
    }


def test_a_build_for_this_cpu_fits() -> None:
    assert llamacpp.mismatch(_info(), HERE) is None
    assert llamacpp.reconfigure_reason(_info(), HERE) is None


def test_a_build_for_another_cpu_is_named_with_its_difference() -> None:
    other = {"machine": "x86_64", "model": "Intel Xeon", "isa_flags": ["amx_tile", "avx2"]}
    why = llamacpp.mismatch(_info(other), HERE)
    assert why is not None
    assert "'Intel Xeon'" in why and "'AMD EPYC'" in why
    assert "+avx512f" in why and "-amx_tile" in why
    assert llamacpp.reconfigure_reason(_info(other), HERE) == why


def test_a_build_without_a_record_or_of_another_version_is_rebuilt() -> None:
    assert "no llama.cpp build" in llamacpp.mismatch(None, HERE)
    assert "before the ISA probe" in llamacpp.mismatch({}, HERE)
    legacy = _info()
    del legacy["cpu"]
    assert "does not record the CPU" in llamacpp.mismatch(legacy, HERE)
    assert "0.0.1" in llamacpp.mismatch(_info(version="0.0.1"), HERE)
    changed = _info()
    changed["base_flags"] = ["-DGGML_NATIVE=OFF"]
    assert llamacpp.reconfigure_reason(changed, HERE) == "the project's cmake flags changed"


def test_loading_a_build_made_for_another_cpu_is_refused_with_the_fix(
    tmp_path: Path, monkeypatch
) -> None:
    other = {"machine": "x86_64", "model": "Some other CPU", "isa_flags": ["amx_tile"]}
    tc = _fake_build(tmp_path, _info(other))
    with pytest.raises(llamacpp.LlamaCppError, match=r"make llamacpp") as err:
        llamacpp.check_build(tc)
    assert "Some other CPU" in str(err.value)
    monkeypatch.setattr(llamacpp, "cpu_signature", lambda: other)
    assert llamacpp.check_build(tc)["cpu"] == other


def test_the_engine_refuses_a_foreign_build(tmp_path: Path, monkeypatch) -> None:
    from quantbench.engines.llamacpp import LlamaCppEngine, LlamaCppSettings

    other = {"machine": "x86_64", "model": "Some other CPU", "isa_flags": []}
    tc = _fake_build(tmp_path, _info(other))
    (tc.bin_dir).mkdir(parents=True, exist_ok=True)
    (tc.bin_dir / "llama-server").write_text("#!/bin/sh\n")
    monkeypatch.setenv(llamacpp.ROOT_ENV, str(tmp_path))
    with pytest.raises(llamacpp.LlamaCppError, match="cannot be used on this machine"):
        LlamaCppEngine()._binary(LlamaCppSettings())


def test_dropped_extensions_reach_the_compiler_flags() -> None:
    from quantbench.native.isa import IsaReport

    isa = IsaReport("x", "cc", ["amx-tile", "avx2"], kept=["avx2"], dropped=["amx-tile"])
    flags = llamacpp.compile_flags(isa)
    assert "-DCMAKE_C_FLAGS=-mno-amx-tile" in flags
    assert "-DCMAKE_CXX_FLAGS=-mno-amx-tile" in flags
    assert "-DGGML_NATIVE=ON" in flags
    clean = IsaReport("x", "cc", ["avx2"], kept=["avx2"])
    assert llamacpp.compile_flags(clean) == list(llamacpp.CMAKE_FLAGS)


def test_amx_is_left_out_even_where_the_probe_saw_it_run() -> None:
    """On a Sapphire Rapids guest the probe's AMX instructions ran, and the pinned release's AMX
    kernels still died (ldtilecfg, SIGSEGV) on every Q8_0 and Q4_K_M matrix: the build excludes
    them wherever -march=native would enable them, and records why."""
    from quantbench.native.isa import IsaReport

    amx = ["amx-bf16", "amx-int8", "amx-tile"]
    isa = IsaReport("sapphirerapids", "cc", [*amx, "avx512f"], kept=[*amx, "avx512f"])
    flags = llamacpp.compile_flags(isa)
    wanted = "-mno-amx-bf16 -mno-amx-int8 -mno-amx-tile"
    assert f"-DCMAKE_C_FLAGS={wanted}" in flags and f"-DCMAKE_CXX_FLAGS={wanted}" in flags
    assert set(llamacpp.excluded(isa)) == set(amx)
    assert all("ldtilecfg" in why for why in llamacpp.excluded(isa).values())
    # a CPU without AMX gets no flag for it (the compiler would not emit it anyway)
    epyc = IsaReport("znver4", "cc", ["avx2", "avx512f"], kept=["avx2", "avx512f"])
    assert llamacpp.compile_flags(epyc) == list(llamacpp.CMAKE_FLAGS)


def test_a_build_of_an_older_recipe_is_configured_again() -> None:
    old = {k: v for k, v in _info().items() if k != "recipe"}
    assert "recipe 1" in (llamacpp.reconfigure_reason(old, HERE) or "")
    assert llamacpp.reconfigure_reason(_info(), HERE) is None


def test_the_default_build_lives_in_the_repository(monkeypatch) -> None:
    monkeypatch.delenv(llamacpp.ROOT_ENV, raising=False)
    repo = Path(__file__).resolve().parents[2]
    assert llamacpp.default_root() == repo / "build" / "llama.cpp"


def test_a_fresh_clone_links_to_the_machines_shared_build(tmp_path: Path, monkeypatch) -> None:
    """The build is the machine's, keyed by release and recipe: a second clone on the same
    machine links to it instead of compiling again (4 minutes on a Xeon, 12 on an EPYC)."""
    repo = tmp_path / "clone"
    monkeypatch.delenv(llamacpp.ROOT_ENV, raising=False)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(llamacpp, "default_root", lambda: repo / "build" / "llama.cpp")
    tc = llamacpp.toolchain()
    link = repo / "build" / "llama.cpp"
    assert link.is_symlink() and link.resolve() == llamacpp.shared_root().resolve()
    assert tc.root == llamacpp.shared_root().resolve()  # cmake sees the real, shared paths
    assert llamacpp.shared_root().name == f"{llamacpp.VERSION}-r{llamacpp.RECIPE}"
    # a folder already there (a build made before the shared cache) is used as it is
    other = tmp_path / "old" / "build" / "llama.cpp"
    other.mkdir(parents=True)
    monkeypatch.setattr(llamacpp, "default_root", lambda: other)
    assert llamacpp.toolchain().root == other.resolve() and not other.is_symlink()


def test_the_source_release_is_taken_from_the_index_page_by_name_and_pinned_hash() -> None:
    # `pip download` of the source release built its build backend and that backend's
    # dependencies from source first (two minutes of an AVX2-only EPYC's setup) for a file whose
    # hash is pinned: the file is now taken straight from the index's JSON page (PEP 691)
    from quantbench.native import llama_build as lb

    other = {"filename": "llama_cpp_python-0.3.35.tar.gz", "url": "u0", "hashes": {}}
    wheel = {"filename": "x.whl", "url": "u1", "hashes": {"sha256": lb.SDIST_SHA256}}
    ours = {"filename": lb.SDIST_NAME, "url": "u2", "hashes": {"sha256": lb.SDIST_SHA256}}
    assert lb.sdist_url({"files": [other, wheel, ours]}) == "u2"
    swapped = {**ours, "hashes": {"sha256": "0" * 64}}  # the same name with other bytes
    assert lb.sdist_url({"files": [other, swapped]}) is None
    assert lb.sdist_url({}) is None


def _configure_recorded(tc: llamacpp.Toolchain, monkeypatch) -> list[list[str]]:
    """Configure `tc` with cmake's run recorded, not made (a CUDA build is long); the probe
    answers as a CPU where every extension runs."""
    ran: list[list[str]] = []

    def run(cmd, what: str) -> None:
        ran.append(list(cmd))
        build = Path(cmd[cmd.index("-B") + 1])
        build.mkdir(parents=True)
        (build / "CMakeCache.txt").write_text("")  # what cmake's configure leaves

    monkeypatch.setattr(llamacpp, "_run", run)
    monkeypatch.setattr(llamacpp, "probe_machine", lambda: IsaReport("x", "cc", ["avx2"], ["avx2"]))
    tc.root.mkdir(parents=True, exist_ok=True)  # as ensure_built's lock makes it
    llamacpp._configure(tc)
    return ran


def test_a_cuda_build_is_made_for_this_machines_gpus_only(fake_gpu, tmp_path, monkeypatch) -> None:
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"  # named to cmake, never run here
    monkeypatch.setenv("CUDACXX", str(nvcc))
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    tc = llamacpp.toolchain(tmp_path / "llama")
    assert tc.cuda_archs == ("90",) and tc.build_dir.name == "cmake-cuda"
    [cmd] = _configure_recorded(tc, monkeypatch)
    assert cmd[:5] == ["cmake", "-S", str(tc.llama_cpp_dir), "-B", str(tc.build_dir)]
    assert "-DGGML_CUDA=ON" in cmd and "-DCMAKE_CUDA_ARCHITECTURES=90" in cmd
    assert f"-DCMAKE_CUDA_COMPILER={nvcc}" in cmd and "-DGGML_NATIVE=ON" in cmd
    info = llamacpp.check_build(tc)  # fits the machine it was made on
    assert info["cuda_architectures"] == ["90"] and info["cuda_compiler"] == str(nvcc)
    # the same build is not taken for a CPU one, nor for other GPUs
    cpu = llamacpp.Toolchain(tc.root)
    assert cpu.build_dir.name == "cmake" and llamacpp.build_info(cpu) is None
    assert llamacpp.mismatch(info, cuda_archs=()) == (
        "it is a CUDA build for sm_90, this machine's stack wants a CPU build"
    )
    assert "wants a CUDA build for sm_89" in llamacpp.mismatch(info, cuda_archs=("89",))
    with pytest.raises(llamacpp.LlamaCppError, match="no llama.cpp build yet.*STACK=cpu"):
        llamacpp.check_build(cpu)
    with pytest.raises(llamacpp.LlamaCppError, match="wants a CUDA build for sm_89.*STACK=cuda"):
        llamacpp.check_build(llamacpp.Toolchain(tc.root, ("89",)))


def test_a_cpu_build_is_not_taken_for_a_cuda_one(fake_gpu, tmp_path: Path) -> None:
    # a build made before there were CUDA builds records none: a CPU build
    assert llamacpp.wanted_cuda_archs() == ("90",)
    assert llamacpp.mismatch(_info(), HERE) == (
        "it is a CPU build, this machine's stack wants a CUDA build for sm_90"
    )
    assert llamacpp.mismatch(_info(), HERE, cuda_archs=()) is None  # STACK=cpu: it fits
    # each is looked for in its own folder: switching runtime.device rebuilds neither
    assert llamacpp.toolchain(tmp_path).build_dir == tmp_path / "cmake-cuda"
    assert llamacpp.toolchain(tmp_path, device="cpu").build_dir == tmp_path / "cmake"


def test_cpu_only_builds_record_no_cuda(tmp_path, monkeypatch) -> None:
    tc = llamacpp.toolchain(tmp_path)
    assert tc.cuda_archs == () and tc.build_dir == tmp_path / "cmake"
    [cmd] = _configure_recorded(tc, monkeypatch)
    assert not [flag for flag in cmd if "CUDA" in flag]
    assert llamacpp.build_info(tc)["cuda_architectures"] == []
    assert llamacpp.check_build(tc)["cuda_compiler"] is None


def test_a_cuda_build_without_nvcc_says_what_is_missing_and_where_to_get_it(
    fake_gpu, tmp_path: Path, monkeypatch
) -> None:
    assert detect().has_gpu  # found once, before PATH loses everything
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("CUDACXX", raising=False)
    monkeypatch.setattr(llamacpp, "CUDA_HOME_BIN", tmp_path / "cuda" / "bin")
    with pytest.raises(llamacpp.LlamaCppError) as err:
        llamacpp.ensure_built(("llama-server",), root=tmp_path / "llama")
    why = str(err.value)
    assert "nvcc" in why and str(empty) in why and str(tmp_path / "cuda" / "bin") in why
    assert "-DGGML_CUDA=ON for sm_90" in why
    assert "CUDA toolkit" in why and "nvidia-cuda-toolkit" in why and "cuda-toolkit" in why
    assert "make llamacpp STACK=cpu" in why and "runtime.device: cpu" in why
    assert not (tmp_path / "llama" / "sdist").exists()  # refused before the 77 MB download
