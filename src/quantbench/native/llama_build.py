"""The project's one llama.cpp: a pinned llama-cpp-python source release, built once with cmake.

PyPI serves llama-cpp-python only as a source tarball, and that tarball carries everything the
project needs from llama.cpp at one version: the C++ sources (`vendor/llama.cpp`), the real
HF -> GGUF converter (`convert_hf_to_gguf.py` with its `conversion/` package and `gguf-py/`; the
`gguf` wheel on PyPI has no converter) and the ctypes bindings (`llama_cpp/`).

Instead of `pip install llama-cpp-python` (which compiles the libraries inside pip, out of reach)
and a second cmake build for the native tools, the tarball is unpacked under `build/llama.cpp/`
and built ONCE with cmake as shared libraries: the Python bindings load `libllama.so` from that
build (through their `LLAMA_CPP_LIB_PATH` hook) and the native tools (`llama-server`,
`llama-quantize`, ...) are further targets of the same build tree, compiled on demand. Each step
is cached: download (sha256-checked), unpack, configure (re-run only when the flags change),
build (cmake's own incremental build).

The build is made for the machine it runs on, and says so. `-DGGML_NATIVE=ON` compiles for every
instruction-set extension the CPU flags advertise; before configuring, :mod:`quantbench.native.isa`
runs one instruction of each such extension and the configuration adds `-mno-<ext>` for those that
fault here (AMX on some Intel Xeon guests). The probe's result, the resulting flags and the CPU
they were made for are written to `build-info.json` in the build folder; a build made for another
CPU (a copied `build/`, a cached CI folder) is rebuilt by `ensure_built` and refused, with the
command that rebuilds it, by everything that only loads it (`check_build`).

On the cuda stack (:mod:`quantbench.native.stack`: an NVIDIA GPU found, or asked for) the build
adds ``-DGGML_CUDA=ON`` and ``-DCMAKE_CUDA_ARCHITECTURES`` for this machine's GPUs only (``90``
for an H100; one entry per kind of GPU), compiled by NVIDIA's ``nvcc``, in a folder of its own
(``cmake-cuda``, beside the CPU build's ``cmake``): a machine switched between
``runtime.device: cpu`` and ``auto`` keeps both builds. The architectures are recorded in
``build-info.json`` (``cuda_architectures``, ``[]`` for a CPU build), so a CPU build is never
taken for a CUDA one, nor one for other GPUs, nor the reverse.

    python -m quantbench.native.llama_build build [--target llama-server ...]   # paths, timings
    python -m quantbench.native.llama_build info                                # build-info.json
    ... --device cpu|cuda|auto      # the stack's build (default: QUANTBENCH_DEVICE, else found)
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from quantbench.errors import UserError, run_main
from quantbench.machine_cache import machine_cache_dir
from quantbench.native import stack
from quantbench.native.isa import IsaReport, cpu_signature, probe_machine

log = logging.getLogger(__name__)

PACKAGE = "llama-cpp-python"
VERSION = "0.3.36"
SDIST_NAME = f"llama_cpp_python-{VERSION}.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
ROOT_ENV = "QUANTBENCH_LLAMACPP_DIR"

# Shared libraries so the Python bindings and the native tools use the same compiled code;
# no web UI download (the default fetches one at build time; this machine has no such network),
# no tests or examples (minutes of compile time for nothing), no OpenSSL (local HTTP only).
CMAKE_FLAGS: tuple[str, ...] = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=ON",
    "-DGGML_NATIVE=ON",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_OPENSSL=OFF",
)
# Extensions never compiled in, whatever the ISA probe says, and why. The pinned release's AMX
# kernels (ggml-cpu/amx) fault on Intel Xeon guests even where AMX itself executes: on a Sapphire
# Rapids guest (2026-11-25) the probe's tile loads, dot products and stores all ran, and
# `ggml_backend_amx_mul_mat` died with a general protection fault on `ldtilecfg` (SIGSEGV,
# si_code SI_KERNEL) on every Q8_0 and Q4_K_M matrix, in the bindings and in llama-server alike.
# An instruction probe cannot vouch for a kernel, and AMX buys nothing for decoding (ggml runs
# single-row products through AVX512-VNNI), so the build leaves it out.
EXCLUDED_EXTENSIONS: dict[str, str] = {
    name: "the pinned llama.cpp's AMX kernels fault on Xeon guests where AMX executes "
    "(general protection fault on ldtilecfg in ggml_backend_amx_mul_mat)"
    for name in ("amx-tile", "amx-int8", "amx-bf16")
}
# Bumped when what a build is made of changes beyond CMAKE_FLAGS: a build of another recipe is
# configured again (2: AMX excluded; 3: unity groups; 4: cold code at -O1).
RECIPE = 4
# Included after llama.cpp's project(): two folders of small sources compiled as one unit each, as
# llama.cpp does for its own model files (180 of the build's 1,130 CPU seconds down to 28 on an
# AVX2-only EPYC), and the code llama-server runs once or never compiled at -O1 (the file says
# which and why). Copied beside the build, so the flag that names it does not depend on where
# the repository is.
RECIPE_FILE = Path(__file__).with_name("llama_recipe.cmake")
BINDING_TARGET = "llama"
BUILD_INFO = "build-info.json"
# The CUDA build's own flags: llama.cpp's CUDA backend, for the architectures of this machine's
# GPUs only (each one more multiplies the CUDA kernels' compile time).
CUDA_FLAG = "-DGGML_CUDA=ON"
# Where NVIDIA's CUDA toolkit installs nvcc when its bin/ is not on PATH.
CUDA_HOME_BIN = Path("/usr/local/cuda/bin")


def rebuild_hint(cuda: bool = False) -> str:
    """The command that builds llama.cpp here for the CPU (or, ``cuda``, for the GPUs too)."""
    device = "cuda" if cuda else "cpu"
    return (
        f"make llamacpp STACK={device} (or: python -m quantbench.native.llama_build build "
        f"--target llama-server --device {device})"
    )


class LlamaCppError(UserError):
    """The pinned llama.cpp toolchain could not be fetched, unpacked or built."""


def shared_root() -> Path:
    """Where this machine keeps the build of this release and recipe, for every clone:
    ``$QUANTBENCH_CACHE`` (default ``~/.cache/quantbench``)/llama.cpp/<version>-r<recipe>. A
    build made here is reused by the next clone on the same machine (the CPU it was made for is
    still checked, and a build for another CPU is made again in place): on 2 cores the build is
    4 minutes of a fresh clone's setup on a Xeon and 12 on an AVX2-only EPYC."""
    base = machine_cache_dir()
    return base / "llama.cpp" / f"{VERSION}-r{RECIPE}"


def default_root() -> Path:
    """build/llama.cpp in the repository (or $QUANTBENCH_LLAMACPP_DIR, or a user cache).

    In the repository it is a link to :func:`shared_root` unless a folder of that name is
    already there (a build made before the shared cache, used as it is)."""
    if env := os.environ.get(ROOT_ENV):
        return Path(env)
    repo = Path(__file__).resolve().parents[3]
    if (repo / "pyproject.toml").is_file():
        return repo / "build" / "llama.cpp"
    return shared_root()


def _link_to_shared(root: Path) -> None:
    """Make the repository's build/llama.cpp a link to the machine's shared build."""
    if root != default_root() or ROOT_ENV in os.environ or root.exists() or root.is_symlink():
        return
    target = shared_root()
    target.mkdir(parents=True, exist_ok=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):  # another process linked it first
        root.symlink_to(target, target_is_directory=True)


@dataclass(frozen=True)
class Toolchain:
    """Where each piece of the pinned release lives below `root`; `cuda_archs`: the CUDA
    architectures its build is for (``()``: the CPU only)."""

    root: Path
    cuda_archs: tuple[str, ...] = ()

    @property
    def cuda(self) -> bool:
        return bool(self.cuda_archs)

    @property
    def sdist(self) -> Path:
        return self.root / "sdist" / SDIST_NAME

    @property
    def source(self) -> Path:
        """The unpacked llama-cpp-python release (holds `llama_cpp/` and `vendor/llama.cpp`)."""
        return self.root / "src" / f"llama_cpp_python-{VERSION}"

    @property
    def llama_cpp_dir(self) -> Path:
        return self.source / "vendor" / "llama.cpp"

    @property
    def converter(self) -> Path:
        return self.llama_cpp_dir / "convert_hf_to_gguf.py"

    @property
    def gguf_py(self) -> Path:
        return self.llama_cpp_dir / "gguf-py"

    @property
    def build_dir(self) -> Path:
        """The CPU build's folder, or the CUDA build's beside it (both are kept)."""
        return self.root / ("cmake-cuda" if self.cuda else "cmake")

    @property
    def bin_dir(self) -> Path:
        """Where cmake puts both the shared libraries and the executables."""
        return self.build_dir / "bin"

    def binary(self, name: str) -> Path:
        return self.bin_dir / name


def wanted_cuda_archs(device: str | None = None) -> tuple[str, ...]:
    """The CUDA architectures the build for ``device`` is for: the stack's decision
    (``--device``, else QUANTBENCH_DEVICE, else the GPUs found); ``()`` on the cpu stack."""
    return stack.decide(device).cuda_architectures


def toolchain(root: Path | None = None, device: str | None = None) -> Toolchain:
    """The toolchain under ``root`` (default :func:`default_root`), its path resolved so that
    cmake records real paths: a shared build stays valid whichever clone linked to it. Its build
    is the one for ``device`` (see :func:`wanted_cuda_archs`)."""
    root = Path(root) if root is not None else default_root()
    _link_to_shared(root)
    return Toolchain(root.resolve() if root.exists() else root, wanted_cuda_archs(device))


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    """One builder at a time (a test run and a DVC stage may both ask for the toolchain)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


# The package index's JSON page for one project (PEP 691, what pip itself reads).
SIMPLE_INDEX = "https://pypi.org/simple/{package}/"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"


def sdist_url(page: dict[str, Any]) -> str | None:
    """The pinned source release's address in the index's JSON page of the project: the file
    named :data:`SDIST_NAME` whose listed sha256 is :data:`SDIST_SHA256`; None where none is."""
    for entry in page.get("files", []):
        if (
            entry.get("filename") == SDIST_NAME
            and entry.get("hashes", {}).get("sha256") == SDIST_SHA256
        ):
            return str(entry["url"])
    return None


def _download_direct(dest: Path) -> str | None:
    """Download the source release straight from PyPI's file host; None when done, else why not.

    `pip download` of a source release prepares its metadata first, which builds the release's
    build backend and its dependencies from source (``--no-binary :all:`` applies to them too):
    two minutes of an AVX2-only EPYC's setup, for a file whose sha256 is pinned anyway."""
    try:
        ask = urllib.request.Request(
            SIMPLE_INDEX.format(package=PACKAGE), headers={"Accept": SIMPLE_JSON}
        )
        with urllib.request.urlopen(ask, timeout=60) as answer:
            url = sdist_url(json.load(answer))
        if url is None:
            return f"PyPI's page of {PACKAGE} lists no {SDIST_NAME} with the pinned sha256"
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}")
        with urllib.request.urlopen(url, timeout=600) as answer, open(tmp, "wb") as out:
            shutil.copyfileobj(answer, out, 1 << 20)
        tmp.replace(dest)
    except (OSError, ValueError) as exc:  # no route, an HTTP error, a page that is not JSON
        return f"{type(exc).__name__}: {exc}"
    return None


def _fetch_sdist(tc: Toolchain) -> None:
    if tc.sdist.is_file() and _sha256(tc.sdist) == SDIST_SHA256:
        return
    tc.sdist.parent.mkdir(parents=True, exist_ok=True)
    log.info("downloading %s==%s (source release, ~77 MB) from PyPI", PACKAGE, VERSION)
    why = _download_direct(tc.sdist)
    if why is not None:
        # an index other than PyPI's (a mirror pip is configured for): pip finds it there
        log.info("direct download failed (%s); asking pip", why)
        cmd = [
            sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
            f"{PACKAGE}=={VERSION}", "-d", str(tc.sdist.parent),
        ]  # fmt: skip
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0 or not tc.sdist.is_file():
            raise LlamaCppError(
                f"could not download {PACKAGE}=={VERSION} from the package index ({why}):\n"
                f"{result.stderr[-2000:]}"
                f"\nPlace {SDIST_NAME} in {tc.sdist.parent} by hand, or set {ROOT_ENV}."
            )
    got = _sha256(tc.sdist)
    if got != SDIST_SHA256:
        tc.sdist.unlink()
        raise LlamaCppError(
            f"{SDIST_NAME} has sha256 {got}, expected {SDIST_SHA256}: the index served another file"
        )


def _unpack(tc: Toolchain) -> None:
    if (tc.source / "PKG-INFO").is_file():
        return
    tmp = tc.source.parent / f".unpack-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with tarfile.open(tc.sdist) as archive:
        archive.extractall(tmp, filter="data")
    shutil.rmtree(tc.source, ignore_errors=True)
    (tmp / tc.source.name).rename(tc.source)
    tmp.rmdir()


def ensure_source(root: Path | None = None, tc: Toolchain | None = None) -> Toolchain:
    """Download (once) and unpack (once) the pinned release; return where everything is."""
    tc = tc or toolchain(root)
    with _locked(tc.root):
        _fetch_sdist(tc)
        _unpack(tc)
    return tc


def excluded(isa: IsaReport) -> dict[str, str]:
    """The extensions -march=native would enable here that the build leaves out whatever the
    probe says (:data:`EXCLUDED_EXTENSIONS`), with why."""
    return {n: why for n, why in EXCLUDED_EXTENSIONS.items() if n in isa.native}


def disable_flags(isa: IsaReport) -> list[str]:
    """``-mno-<ext>`` for what the probe saw fault and for what the build excludes."""
    return sorted(set(isa.disable_flags) | {f"-mno-{n}" for n in excluded(isa)})


def cuda_compiler(archs: Sequence[str] = ()) -> Path:
    """NVIDIA's nvcc: ``$CUDACXX`` (what cmake itself reads), else on PATH, else in
    /usr/local/cuda/bin; refused, saying where to get it, where there is none."""
    for found in (os.environ.get("CUDACXX"), shutil.which("nvcc"), CUDA_HOME_BIN / "nvcc"):
        if found and os.access(found, os.X_OK) and Path(found).is_file():
            return Path(found)
    what = stack.arch_names(archs) or "this machine's GPUs"
    raise LlamaCppError(
        f"the cuda stack builds llama.cpp with CUDA ({CUDA_FLAG} for {what}), which needs "
        f"NVIDIA's CUDA compiler nvcc: there is none on PATH ({os.environ.get('PATH', '')}) "
        f"or in {CUDA_HOME_BIN}. Install NVIDIA's CUDA toolkit (Debian/Ubuntu: apt-get install "
        "nvidia-cuda-toolkit, or the cuda-toolkit packages of NVIDIA's repository, "
        "https://developer.nvidia.com/cuda-downloads) and put its bin/ on PATH (or set "
        "CUDACXX); or build for the CPU instead: make llamacpp STACK=cpu (make setup "
        "STACK=cpu for the whole CPU stack), with runtime.device: cpu in params.yaml"
    )


def cuda_flags(archs: Sequence[str], nvcc: Path) -> list[str]:
    """llama.cpp's CUDA backend for ``archs`` only (``["90"]``), compiled by ``nvcc``."""
    return [
        CUDA_FLAG,
        f"-DCMAKE_CUDA_ARCHITECTURES={';'.join(archs)}",
        f"-DCMAKE_CUDA_COMPILER={nvcc}",
    ]


def compile_flags(
    isa: IsaReport, cuda_archs: Sequence[str] = (), nvcc: Path | None = None
) -> list[str]:
    """CMAKE_FLAGS plus the C/C++ flags that keep out what faults here (probed or known), and
    on the cuda stack the CUDA backend's (``nvcc``: default :func:`cuda_compiler`)."""
    flags = list(CMAKE_FLAGS)
    if off := disable_flags(isa):
        extra = " ".join(off)
        flags += [f"-DCMAKE_C_FLAGS={extra}", f"-DCMAKE_CXX_FLAGS={extra}"]
    if cuda_archs:
        flags += cuda_flags(cuda_archs, nvcc or cuda_compiler(cuda_archs))
    return flags


def build_info(tc: Toolchain) -> dict[str, Any] | None:
    """What the build in `tc` was configured with and for (None where there is none)."""
    path = tc.build_dir / BUILD_INFO
    if not (tc.build_dir / "CMakeCache.txt").is_file():
        return None
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {}  # configured, but by something that did not record what for


def _kind(archs: Sequence[str]) -> str:
    return f"a CUDA build for {stack.arch_names(archs)}" if archs else "a CPU build"


def mismatch(
    info: dict[str, Any] | None,
    cpu: dict[str, Any] | None = None,
    cuda_archs: Sequence[str] | None = None,
) -> str | None:
    """Why the build described by `info` is not one for this machine, or None when it is;
    ``cuda_archs``: the CUDA architectures wanted (default: :func:`wanted_cuda_archs`)."""
    if info is None:
        return "there is no llama.cpp build yet"
    if not info:
        return (
            "it records neither the CPU nor the flags it was built for (made before the ISA probe)"
        )
    if info.get("version") != VERSION:
        return f"it is llama.cpp {info.get('version')!r}, the project pins {VERSION}"
    built = tuple(info.get("cuda_architectures") or ())  # none recorded: made before CUDA builds
    wanted = tuple(cuda_archs) if cuda_archs is not None else wanted_cuda_archs()
    if built != wanted:
        return f"it is {_kind(built)}, this machine's stack wants {_kind(wanted)}"
    built_for, here = info.get("cpu"), cpu if cpu is not None else cpu_signature()
    if built_for != here:
        if not isinstance(built_for, dict):
            return "it does not record the CPU it was built for (made before the ISA probe)"
        old, new = set(built_for.get("isa_flags", [])), set(here.get("isa_flags", []))
        diff = ", ".join(
            [f"+{f}" for f in sorted(new - old)] + [f"-{f}" for f in sorted(old - new)]
        )
        return (
            f"it was built for {built_for.get('model')!r}, this machine is {here.get('model')!r}"
            + (f" (instruction sets here: {diff})" if diff else "")
        )
    return None


def check_build(tc: Toolchain | None = None) -> dict[str, Any]:
    """Refuse a build made for another CPU (or none): its kernels may not run here."""
    tc = tc or toolchain()
    info = build_info(tc)
    why = mismatch(info, cuda_archs=tc.cuda_archs)
    if why is not None:
        raise LlamaCppError(
            f"the llama.cpp build in {tc.build_dir} cannot be used on this machine: {why}. "
            f"Rebuild it here with `{rebuild_hint(tc.cuda)}` (about 7 minutes on 2 cores for "
            "the CPU; a CUDA build takes longer)"
        )
    assert info is not None
    return info


def reconfigure_reason(
    info: dict[str, Any] | None, cpu: dict[str, Any], cuda_archs: Sequence[str] | None = None
) -> str | None:
    """Why the build must be configured (again) before building, or None to keep it."""
    why = mismatch(info, cpu, cuda_archs)
    if why is None and info is not None and info.get("base_flags") != list(CMAKE_FLAGS):
        why = "the project's cmake flags changed"
    if why is None and info is not None and info.get("recipe", 1) != RECIPE:
        why = f"it was made by build recipe {info.get('recipe', 1)}, the project's is {RECIPE}"
    return why


def _configure(tc: Toolchain) -> None:
    cpu = cpu_signature()
    info = build_info(tc)
    why = reconfigure_reason(info, cpu, tc.cuda_archs)
    if why is None:
        return
    log.warning("configuring llama.cpp for this machine: %s", why)
    if shutil.which("cmake") is None or shutil.which("c++") is None:
        raise LlamaCppError(
            "building llama.cpp needs cmake and a C++ compiler (apt-get install cmake g++)"
        )
    nvcc = cuda_compiler(tc.cuda_archs) if tc.cuda else None
    isa = probe_machine()
    if isa.dropped:
        log.warning(
            "instruction sets advertised here that do not execute, left out of the build: %s",
            ", ".join(f"{n} ({isa.outcomes.get(n, '?')})" for n in isa.dropped),
        )
    recipe = tc.root / RECIPE_FILE.name
    shutil.copyfile(RECIPE_FILE, recipe)
    flags = [*compile_flags(isa, tc.cuda_archs, nvcc), f"-DCMAKE_PROJECT_INCLUDE={recipe}"]
    shutil.rmtree(tc.build_dir, ignore_errors=True)
    cmd = ["cmake", "-S", str(tc.llama_cpp_dir), "-B", str(tc.build_dir), *flags]
    _run(cmd, "configure llama.cpp")
    wanted = {
        "version": VERSION,
        "recipe": RECIPE,
        "base_flags": list(CMAKE_FLAGS),
        "cmake_flags": flags,
        "cpu": cpu,
        "isa": isa.to_dict(),
        "excluded": excluded(isa),
        "cuda_architectures": list(tc.cuda_archs),
        "cuda_compiler": str(nvcc) if nvcc else None,
    }
    (tc.build_dir / BUILD_INFO).write_text(json.dumps(wanted, indent=2) + "\n", encoding="utf-8")


def _run(cmd: Sequence[str], what: str) -> None:
    result = subprocess.run(list(cmd), capture_output=True, text=True)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr)[-4000:]
        raise LlamaCppError(f"{what} failed (exit {result.returncode}): {' '.join(cmd)}\n{tail}")


def ensure_built(
    targets: Sequence[str] = (BINDING_TARGET,),
    root: Path | None = None,
    jobs: int | None = None,
    device: str | None = None,
) -> Toolchain:
    """Build the given cmake targets (cached; a no-op when up to date) and return the toolchain.

    `llama` is the shared library the Python bindings load; tools are `llama-server`,
    `llama-quantize`, `llama-perplexity`, `llama-bench`, ... ``device``: whose stack's build
    (:func:`toolchain`); a CUDA build without nvcc is refused before anything is downloaded.
    """
    tc = toolchain(root, device)
    if tc.cuda:
        cuda_compiler(tc.cuda_archs)
    tc = ensure_source(tc=tc)
    jobs = jobs or os.cpu_count() or 1
    with _locked(tc.root):
        _configure(tc)
        start = time.perf_counter()
        cmd = ["cmake", "--build", str(tc.build_dir), "-j", str(jobs), "--target", *targets]
        _run(cmd, f"build {', '.join(targets)}")
        log.info(
            "llama.cpp targets %s up to date (%.1f s)",
            ", ".join(targets),
            time.perf_counter() - start,
        )
    return tc


def load_binding(root: Path | None = None) -> ModuleType:
    """Import llama-cpp-python's ctypes bindings from the pinned release, on our libllama.so."""
    if "llama_cpp" in sys.modules:
        module = sys.modules["llama_cpp"]
        _check_binding(module, toolchain(root))
        return module
    tc = ensure_built((BINDING_TARGET,), root)
    # The bindings read this once, at import, to find libllama.so (and its libggml* siblings).
    os.environ["LLAMA_CPP_LIB_PATH"] = str(tc.bin_dir)
    sys.path.insert(0, str(tc.source))
    import llama_cpp

    _check_binding(llama_cpp, tc)
    return llama_cpp


def _check_binding(module: ModuleType, tc: Toolchain) -> None:
    where = Path(module.__file__ or "").resolve()
    if tc.source.resolve() not in where.parents:
        raise LlamaCppError(
            f"another llama_cpp is imported ({where}); quantbench uses the pinned build in "
            f"{tc.source}: uninstall llama-cpp-python from this environment"
        )
    if module.__version__ != VERSION:
        raise LlamaCppError(f"llama_cpp {module.__version__} imported, expected {VERSION}")


def converter_env(tc: Toolchain) -> dict[str, str]:
    """Environment for running convert_hf_to_gguf.py: its own gguf-py, never the PyPI wheel's."""
    env = dict(os.environ)
    env.pop("NO_LOCAL_GGUF", None)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(tc.gguf_py), env.get("PYTHONPATH", "")) if p
    )
    return env


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Fetch and build the pinned llama.cpp toolchain.")
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--device",
        choices=stack.DEVICES,
        default=None,
        help="the stack whose build (default: QUANTBENCH_DEVICE, else a GPU where one is found)",
    )
    build = sub.add_parser("build", parents=[common], help="download, unpack and build (cached)")
    build.add_argument("--target", action="append", default=None, help="cmake target (repeatable)")
    build.add_argument("--jobs", type=int, default=None)
    sub.add_parser("paths", parents=[common], help="print where the pieces are (no download)")
    sub.add_parser("info", parents=[common], help="print build-info.json and whether it fits")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname).1s %(name)s: %(message)s"
    )
    if args.command == "info":
        tc = toolchain(device=args.device)
        info = build_info(tc)
        why = mismatch(info, cuda_archs=tc.cuda_archs)
        print(
            json.dumps(
                {"build_info": info, "fits_this_machine": why is None, "why_not": why}, indent=2
            )
        )
        return 0
    if args.command == "paths":
        tc = toolchain(device=args.device)
    else:
        start = time.perf_counter()
        targets = tuple(args.target or [BINDING_TARGET])
        tc = ensure_built(targets, jobs=args.jobs, device=args.device)
        print(f"built in {time.perf_counter() - start:.1f} s")
    for name in ("root", "sdist", "source", "converter", "gguf_py", "build_dir", "bin_dir"):
        print(f"{name}: {getattr(tc, name)}")
    return 0


if __name__ == "__main__":
    run_main(main)  # a user error (no nvcc, no cmake, a failed download) as one line, exit 2
