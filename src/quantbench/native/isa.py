"""Which instruction-set extensions this machine really executes, found by running them.

``-march=native`` makes the compiler use every extension the CPU flags advertise. On some virtual
machines an advertised extension faults when executed: Intel Xeon guests list ``amx_tile
amx_int8 amx_bf16`` and grant the AMX permission (``arch_prctl(ARCH_REQ_XCOMP_PERM, 18)`` returns
0), yet ``ldtilecfg`` dies with SIGILL. Neither the flags nor the permission tell; only executing
the instruction does.

So, for each extension the native compiler would enable, a tiny C program that executes one of
its instructions is compiled with just that extension and run in its own process. An extension
whose program runs and prints the expected value is kept; one whose program faults (or prints
something else) is dropped, and the build adds ``-mno-<ext>`` to its C and C++ flags (GCC and
clang honour an explicit ``-mno-`` over what ``-march=native`` implies, whatever the order).

Extensions the native compiler enables but for which no probe exists are kept and listed as
``unprobed`` in the result, so a record always says what was and was not checked.
"""

from __future__ import annotations

import json
import platform
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

PROBE_TIMEOUT_S = 20.0
EXPECTED = "ok 42"

# C bodies: each executes at least one instruction of its extension on data the compiler cannot
# fold (volatile inputs, -O0), and prints EXPECTED when the result is right.
_VEC = """
static volatile int seed = 1;
"""
_BODIES: dict[str, str] = {
    "avx": "__m256 a = _mm256_set1_ps((float)seed * 21.0f); a = _mm256_add_ps(a, a);"
    " float o[8]; _mm256_storeu_ps(o, a); R((int)o[3]);",
    "avx2": "__m256i a = _mm256_set1_epi32(seed * 21); a = _mm256_add_epi32(a, a);"
    " int o[8]; _mm256_storeu_si256((__m256i*)o, a); R(o[5]);",
    "fma": "__m256 a = _mm256_set1_ps((float)seed * 20.0f); __m256 b = _mm256_set1_ps(2.0f);"
    " a = _mm256_fmadd_ps(a, _mm256_set1_ps(1.0f), b); float o[8]; _mm256_storeu_ps(o, a);"
    " R((int)(o[0] * 2.0f) - 2);",
    "f16c": "__m128 a = _mm_set1_ps((float)seed * 42.0f); __m128i h = _mm_cvtps_ph(a, 0);"
    " __m128 b = _mm_cvtph_ps(h); float o[4]; _mm_storeu_ps(o, b); R((int)o[1]);",
    "bmi2": "unsigned x = _pdep_u32((unsigned)seed * 42u, 0xffffffffu); R((int)x);",
    "avxvnni": "__m256i acc = _mm256_setzero_si256(); __m256i a = _mm256_set1_epi8((char)seed);"
    " __m256i b = _mm256_set1_epi8(0); b = _mm256_insert_epi8(b, 42, 0);"
    " acc = _mm256_dpbusd_avx_epi32(acc, a, b); int o[8];"
    " _mm256_storeu_si256((__m256i*)o, acc); R(o[0]);",
    "avx512f": "__m512 a = _mm512_set1_ps((float)seed * 21.0f); a = _mm512_add_ps(a, a);"
    " float o[16]; _mm512_storeu_ps(o, a); R((int)o[15]);",
    "avx512cd": "__m512i a = _mm512_set1_epi32(seed); __m512i z = _mm512_lzcnt_epi32(a);"
    " int o[16]; _mm512_storeu_si512(o, z); R(o[0] + 11);",
    "avx512vl": "__m256 a = _mm256_set1_ps((float)seed * 21.0f);"
    " a = _mm256_mask_add_ps(a, (__mmask8)0xff, a, a); float o[8]; _mm256_storeu_ps(o, a);"
    " R((int)o[2]);",
    "avx512dq": "__m512i a = _mm512_set1_epi64((long long)seed * 42); __m512d d ="
    " _mm512_cvtepi64_pd(a); double o[8]; _mm512_storeu_pd(o, d); R((int)o[7]);",
    "avx512bw": "__m512i a = _mm512_set1_epi8((char)(seed * 21)); a = _mm512_add_epi8(a, a);"
    " char o[64]; _mm512_storeu_si512(o, a); R(o[63]);",
    "avx512vbmi": "__m512i a = _mm512_set1_epi8((char)(seed * 42)); __m512i i ="
    " _mm512_setzero_si512(); a = _mm512_permutexvar_epi8(i, a); char o[64];"
    " _mm512_storeu_si512(o, a); R(o[9]);",
    "avx512vnni": "__m512i acc = _mm512_setzero_si512(); __m512i a = _mm512_set1_epi8((char)seed);"
    " __m512i b = _mm512_set1_epi32(42); acc = _mm512_dpbusd_epi32(acc, a, b); int o[16];"
    " _mm512_storeu_si512(o, acc); R(o[4]);",
    "avx512bf16": "__m512 a = _mm512_set1_ps((float)seed * 21.0f); __m256bh h ="
    " _mm512_cvtneps_pbh(a); __m512 b = _mm512_set1_ps(1.0f); __m512 acc = _mm512_setzero_ps();"
    " acc = _mm512_dpbf16_ps(acc, _mm512_cvtne2ps_pbh(b, a), _mm512_cvtne2ps_pbh("
    "_mm512_setzero_ps(), b)); (void)h; float o[16]; _mm512_storeu_ps(o, acc); R((int)o[0]);",
    "avx512ifma": "__m512i a = _mm512_set1_epi64(0); __m512i b = _mm512_set1_epi64(seed * 6);"
    " __m512i c = _mm512_set1_epi64(7); a = _mm512_madd52lo_epu64(a, b, c); long long o[8];"
    " _mm512_storeu_si512(o, a); R((int)o[1]);",
    "avx512vbmi2": "__m512i a = _mm512_set1_epi16((short)(seed * 42)); a ="
    " _mm512_shldi_epi16(a, a, 0); short o[32]; _mm512_storeu_si512(o, a); R(o[3]);",
    "avx512bitalg": "__m512i a = _mm512_set1_epi8((char)seed); __m512i c ="
    " _mm512_popcnt_epi8(a); char o[64]; _mm512_storeu_si512(o, c); R(o[0] + 41);",
    "avx512vpopcntdq": "__m512i a = _mm512_set1_epi64(seed); __m512i c ="
    " _mm512_popcnt_epi64(a); long long o[8]; _mm512_storeu_si512(o, c); R((int)o[0] + 41);",
    "avx512fp16": "__m512h a = _mm512_set1_ph((_Float16)(seed * 21)); a = _mm512_add_ph(a, a);"
    " _Float16 o[32]; _mm512_storeu_ph(o, a); R((int)o[0]);",
    "gfni": "__m128i a = _mm_set1_epi8((char)(seed * 42)); __m128i m ="
    " _mm_set1_epi64x(0x0102040810204080LL); a = _mm_gf2p8affine_epi64_epi8(a, m, 0);"
    " char o[16]; _mm_storeu_si128((__m128i*)o, a); R(o[0]);",
    "vaes": "__m256i a = _mm256_set1_epi32(seed); __m256i k = _mm256_setzero_si256();"
    " a = _mm256_aesenc_epi128(a, k); int o[8]; _mm256_storeu_si256((__m256i*)o, a);"
    " R(42 + (o[0] == o[4] ? 0 : 1));",
    "vpclmulqdq": "__m256i a = _mm256_set1_epi64x(seed * 21); __m256i b = _mm256_set1_epi64x(2);"
    " __m256i c = _mm256_clmulepi64_epi128(a, b, 0); long long o[4];"
    " _mm256_storeu_si256((__m256i*)o, c); R((int)o[0]);",
}

# AMX needs the kernel's permission, a tile configuration, and (for the compute extensions) a
# dot product whose result is checked.
_AMX_PRELUDE = """
#include <sys/syscall.h>
#include <unistd.h>
#include <stdint.h>
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
typedef struct {
    uint8_t palette_id; uint8_t start_row; uint8_t reserved[14];
    uint16_t colsb[16]; uint8_t rows[16];
} __attribute__((packed)) tilecfg_t;
static int amx_setup(void) {
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) return 0;
    static tilecfg_t cfg;
    cfg.palette_id = 1;
    for (int t = 0; t < 3; t++) { cfg.rows[t] = 16; cfg.colsb[t] = 64; }
    _tile_loadconfig(&cfg);
    return 1;
}
"""
_AMX_BODIES: dict[str, str] = {
    "amx-tile": 'if (!amx_setup()) { puts("no permission"); return 3; }'
    " static int32_t c[16 * 16]; c[0] = seed * 42; _tile_loadd(2, c, 64); _tile_stored(2, c, 64);"
    " _tile_release(); R(c[0]);",
    "amx-int8": 'if (!amx_setup()) { puts("no permission"); return 3; }'
    " static int8_t a[16 * 64], b[16 * 64]; static int32_t c[16 * 16];"
    " a[0] = (int8_t)seed; b[0] = 42; _tile_loadd(0, a, 64); _tile_loadd(1, b, 64);"
    " _tile_zero(2); _tile_dpbssd(2, 0, 1); _tile_stored(2, c, 64); _tile_release(); R(c[0]);",
    "amx-bf16": 'if (!amx_setup()) { puts("no permission"); return 3; }'
    " static uint16_t a[16 * 32], b[16 * 32]; static float c[16 * 16];"
    " a[0] = 0x3f80; b[0] = 0x4228; _tile_loadd(0, a, 64); _tile_loadd(1, b, 64);"
    " _tile_zero(2); _tile_dpbf16ps(2, 0, 1); _tile_stored(2, c, 64); _tile_release();"
    " R((int)c[0] * seed);",
}


@dataclass(frozen=True)
class Probe:
    """One extension: the compiler flag that enables it and a program that executes it."""

    name: str
    """The compiler's name for the extension, as in ``-m<name>`` (``avx512vnni``, ``amx-int8``)."""
    source: str
    needs: tuple[str, ...] = ()
    """Other ``-m`` flags the program needs to compile (an AVX-512 subset needs avx512f)."""
    enable: bool = True
    """Compile with ``-m<name>``; False for a program that needs no extension (tests)."""

    @property
    def flags(self) -> list[str]:
        return [f"-m{n}" for n in (*self.needs, *((self.name,) if self.enable else ()))]


def _program(body: str, prelude: str = "") -> str:
    return (
        "#include <immintrin.h>\n#include <stdio.h>\n"
        + _VEC
        + prelude
        + '#define R(x) do { printf("ok %d\\n", (int)(x)); return 0; } while (0)\n'
        + "int main(void) { "
        + body
        + " }\n"
    )


def _needs(name: str) -> tuple[str, ...]:
    if name.startswith("avx512") and name != "avx512f":
        return ("avx512f", "avx512vl") if name != "avx512vl" else ("avx512f",)
    if name in ("fma", "f16c", "avxvnni", "vaes", "vpclmulqdq"):
        return ("avx", "avx2")
    if name.startswith("amx-") and name != "amx-tile":
        return ("amx-tile",)
    return ()


PROBES: dict[str, Probe] = {
    **{n: Probe(n, _program(b), _needs(n)) for n, b in _BODIES.items()},
    **{n: Probe(n, _program(b, _AMX_PRELUDE), _needs(n)) for n, b in _AMX_BODIES.items()},
}


@dataclass(frozen=True)
class ProbeOutcome:
    """What running one extension's program did."""

    name: str
    executes: bool
    detail: str
    """'ok', 'killed by SIGILL', 'exit code 3: no permission', 'does not compile: ...'."""


@dataclass
class IsaReport:
    """The probe's result: what the native compiler would enable, what runs, what is dropped."""

    arch: str
    """The CPU the compiler's -march=native resolves to (znver5, sapphirerapids, ...)."""
    compiler: str
    native: list[str]
    """Extensions -march=native enables (the -m flags the compiler lists as enabled)."""
    kept: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    unprobed: list[str] = field(default_factory=list)
    outcomes: dict[str, str] = field(default_factory=dict)

    @property
    def disable_flags(self) -> list[str]:
        """The flags that keep the compiler from emitting what faults here."""
        return [f"-mno-{name}" for name in self.dropped]

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["disable_flags"] = self.disable_flags
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> IsaReport:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})  # type: ignore[arg-type]


def compiler() -> str:
    """The C compiler cmake would pick: $CC, else cc, gcc or clang."""
    import os

    for candidate in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if candidate and shutil.which(candidate):
            return candidate
    raise FileNotFoundError("no C compiler found (apt-get install gcc)")


_ENABLED = re.compile(r"^\s+-m([a-z0-9-]+)\s+\[enabled\]", re.MULTILINE)
_ARCH = re.compile(r"^\s+-march=\s+(\S+)", re.MULTILINE)


def native_extensions(cc: str | None = None) -> tuple[str, list[str]]:
    """(resolved -march, the -m extensions -march=native enables) as the compiler reports them.

    GCC lists its target options with ``-Q --help=target``; for clang (which has no such listing)
    the predefined macros stand in: ``__AVX512F__`` -> ``avx512f``.
    """
    cc = cc or compiler()
    out = subprocess.run(
        [cc, "-march=native", "-Q", "--help=target"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if out.returncode == 0 and "[enabled]" in out.stdout:
        arch = _ARCH.search(out.stdout)
        enabled = sorted(set(_ENABLED.findall(out.stdout)) & set(PROBES) | _isa_like(out.stdout))
        return (arch.group(1) if arch else "native", enabled)
    macros = subprocess.run(
        [cc, "-march=native", "-dM", "-E", "-x", "c", "-"],
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    ).stdout
    defined = {m.lower() for m in re.findall(r"#define __([A-Z0-9_]+)__ 1", macros)}
    enabled = sorted(n for n in PROBES if n.replace("-", "_") in defined)
    return ("native", enabled)


def _isa_like(help_text: str) -> set[str]:
    """Enabled -m options that name instruction-set extensions (for the 'unprobed' list)."""
    isa = re.compile(r"^(avx|amx|sse|fma|f16c|bmi|gfni|vaes|vpclmul|sha|aes|pclmul|adx)")
    return {m for m in _ENABLED.findall(help_text) if isa.match(m) and "split" not in m}


Runner = Callable[[Probe, Path, str], ProbeOutcome]


def run_probe(probe: Probe, workdir: Path, cc: str) -> ProbeOutcome:
    """Compile ``probe`` with its flags only and run it in its own process."""
    src = workdir / f"{probe.name}.c"
    exe = workdir / probe.name
    src.write_text(probe.source, encoding="utf-8")
    built = subprocess.run(
        [cc, "-O0", *probe.flags, str(src), "-o", str(exe)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if built.returncode != 0:
        first = (built.stderr.strip().splitlines() or ["?"])[0]
        return ProbeOutcome(probe.name, False, f"does not compile: {first[:200]}")
    try:
        ran = subprocess.run(
            [str(exe)], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return ProbeOutcome(probe.name, False, f"hung for {PROBE_TIMEOUT_S:g} s")
    if ran.returncode < 0:
        import signal

        return ProbeOutcome(probe.name, False, f"killed by {signal.Signals(-ran.returncode).name}")
    text = ran.stdout.strip()
    if ran.returncode != 0:
        return ProbeOutcome(probe.name, False, f"exit code {ran.returncode}: {text[:100]}")
    if text != EXPECTED:
        return ProbeOutcome(
            probe.name, False, f"wrong result {text[:100]!r} (expected {EXPECTED!r})"
        )
    return ProbeOutcome(probe.name, True, "ok")


def decide(
    arch: str,
    cc: str,
    native: Iterable[str],
    outcomes: Mapping[str, ProbeOutcome],
) -> IsaReport:
    """Keep the native extensions whose probe ran; drop those that did not.

    An extension whose probe did not compile is dropped too: the same compiler would then emit
    code for it that nothing here has checked.
    """
    native = sorted(set(native))
    report = IsaReport(arch=arch, compiler=cc, native=native)
    for name in native:
        outcome = outcomes.get(name)
        if outcome is None:
            report.unprobed.append(name)
            continue
        report.outcomes[name] = outcome.detail
        (report.kept if outcome.executes else report.dropped).append(name)
    # An extension that needs a dropped one cannot be used either (amx-int8 needs amx-tile).
    for name in list(report.kept):
        if any(need in report.dropped for need in PROBES[name].needs):
            report.kept.remove(name)
            report.dropped.append(name)
            report.outcomes[name] += f"; dropped with {', '.join(PROBES[name].needs)}"
    report.dropped.sort()
    return report


def probe_machine(
    cc: str | None = None,
    runner: Runner = run_probe,
    native: tuple[str, list[str]] | None = None,
) -> IsaReport:
    """Probe every extension -march=native would enable on this machine (a few seconds).

    ``native`` ((arch, extensions)) replaces the compiler's own list, for tests.
    """
    if native is None and platform.machine().lower() not in ("x86_64", "amd64", "i686", "i386"):
        return IsaReport(arch=platform.machine(), compiler=cc or "", native=[])
    cc = cc or compiler()
    arch, native_list = native or native_extensions(cc)
    outcomes: dict[str, ProbeOutcome] = {}
    with tempfile.TemporaryDirectory(prefix="qb-isa-") as tmp:
        for name in native_list:
            if name in PROBES:
                outcomes[name] = runner(PROBES[name], Path(tmp), cc)
    return decide(arch, cc, native_list, outcomes)


CPUINFO = Path("/proc/cpuinfo")


@dataclass(frozen=True)
class AdvertisedCpu:
    """What the kernel's ``/proc/cpuinfo`` says of the CPU: its model name and the instruction-set
    flags it advertises (which is not what it executes: :func:`probe_machine`)."""

    model: str | None
    """``model name`` (None: not given, as on most ARM machines)."""
    flags: frozenset[str]
    """``flags`` on x86, ``Features`` on ARM."""


def advertised_cpu(path: Path = CPUINFO) -> AdvertisedCpu:
    """The one reader of ``/proc/cpuinfo`` (the fingerprint, the native builds' CPU signature and
    the estimator's machine all read it here); the last processor's lines win, and a machine
    without the file advertises nothing."""
    model, flags = None, frozenset[str]()
    try:
        lines = path.read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            model = value.strip()
        elif key.strip() in ("flags", "Features"):
            flags = frozenset(value.split())
    return AdvertisedCpu(model, flags)


def cpu_signature() -> dict[str, object]:
    """What a native build depends on: the CPU model and the ISA flags it advertises."""
    cpu = advertised_cpu()
    isa = re.compile(
        r"^(avx|amx|sse|ssse|fma|f16c|bmi|gfni|vaes|vpclmul|sha|aes|pclmul|adx|asimd|sve)"
    )
    return {
        "machine": platform.machine(),
        "model": cpu.model if cpu.model is not None else platform.processor() or "unknown",
        "isa_flags": sorted(f for f in cpu.flags if isa.match(f)),
    }


def main() -> int:
    report = probe_machine()
    print(json.dumps(report.to_dict(), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
