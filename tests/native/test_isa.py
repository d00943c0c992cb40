"""The instruction-set probe: real programs that run, fault or lie, and the keep/drop decision."""

from __future__ import annotations

from pathlib import Path

import pytest

from quantbench.native import isa
from quantbench.native.isa import Probe, ProbeOutcome, decide, probe_machine, run_probe

GOOD = isa._program("R(seed * 42);")
TRAPS = isa._program("__builtin_trap(); R(42);")  # ud2: SIGILL, like an AMX tile op on a bad VM
LIES = isa._program("R(41);")


def test_a_program_that_executes_is_kept(tmp_path: Path) -> None:
    outcome = run_probe(Probe("good", GOOD, enable=False), tmp_path, isa.compiler())
    assert outcome == ProbeOutcome("good", True, "ok")


def test_a_program_that_faults_is_dropped_with_its_signal(tmp_path: Path) -> None:
    outcome = run_probe(Probe("traps", TRAPS, enable=False), tmp_path, isa.compiler())
    assert not outcome.executes
    assert outcome.detail == "killed by SIGILL"


def test_a_wrong_result_is_not_taken_for_a_working_extension(tmp_path: Path) -> None:
    outcome = run_probe(Probe("lies", LIES, enable=False), tmp_path, isa.compiler())
    assert not outcome.executes
    assert "wrong result" in outcome.detail


def test_a_program_the_compiler_refuses_is_dropped(tmp_path: Path) -> None:
    outcome = run_probe(Probe("broken", "int main(void) { return }"), tmp_path, isa.compiler())
    assert not outcome.executes
    assert outcome.detail.startswith("does not compile")


def _outcomes(**executes: bool) -> dict[str, ProbeOutcome]:
    return {
        name.replace("_", "-"): ProbeOutcome(
            name.replace("_", "-"), ok, "ok" if ok else "killed by SIGILL"
        )
        for name, ok in executes.items()
    }


def test_decide_keeps_what_runs_drops_what_faults_and_lists_the_unprobed() -> None:
    native = ["avx2", "avx512f", "avx512vnni", "amx-tile", "amx-int8", "amx-bf16", "sse4"]
    outcomes = _outcomes(
        avx2=True, avx512f=True, avx512vnni=True, amx_tile=False, amx_int8=False, amx_bf16=False
    )
    report = decide("sapphirerapids", "cc", native, outcomes)
    assert report.kept == ["avx2", "avx512f", "avx512vnni"]
    assert report.dropped == ["amx-bf16", "amx-int8", "amx-tile"]
    assert report.unprobed == ["sse4"]
    assert report.disable_flags == ["-mno-amx-bf16", "-mno-amx-int8", "-mno-amx-tile"]
    assert report.outcomes["amx-tile"] == "killed by SIGILL"


def test_an_extension_that_needs_a_dropped_one_is_dropped_too() -> None:
    # amx-int8 "ran" (say the probe were wrong) but the tile setup it needs faults: both go.
    report = decide("x", "cc", ["amx-tile", "amx-int8"], _outcomes(amx_tile=False, amx_int8=True))
    assert report.dropped == ["amx-int8", "amx-tile"]
    assert report.kept == []
    assert "dropped with amx-tile" in report.outcomes["amx-int8"]


def test_probe_machine_drops_a_faulting_extension_and_keeps_the_rest(tmp_path: Path) -> None:
    """The whole probe with the real compile-and-run, where one extension's program traps."""
    real = run_probe

    def runner(probe: Probe, workdir: Path, cc: str) -> ProbeOutcome:
        if probe.name == "amx-tile":  # what an AMX-advertising guest does
            probe = Probe("amx-tile", TRAPS, enable=False)
        return real(probe, workdir, cc)

    report = probe_machine(runner=runner, native=("test", ["avx2", "amx-tile", "amx-int8"]))
    assert "avx2" in report.kept or report.outcomes["avx2"] != "ok"
    assert report.dropped[:1] == ["amx-int8"] and "amx-tile" in report.dropped
    assert "-mno-amx-tile" in report.disable_flags


def test_report_round_trips_through_json() -> None:
    report = decide("x", "cc", ["avx2", "amx-tile"], _outcomes(avx2=True, amx_tile=False))
    again = isa.IsaReport.from_dict(report.to_dict())
    assert again == report and again.disable_flags == ["-mno-amx-tile"]


def test_every_probe_for_what_this_compiler_enables_compiles_and_checks_its_answer() -> None:
    """On this machine: each probe program of an extension -march=native enables builds and
    either runs correctly or faults; none fails to compile or prints a wrong answer (which would
    be a bug in the probe, dropping an extension that works)."""
    report = probe_machine()
    assert report.native, "the compiler listed no extensions for -march=native"
    for name, detail in report.outcomes.items():
        assert not detail.startswith(("does not compile", "wrong result")), (name, detail)


@pytest.mark.parametrize("name", sorted(isa.PROBES))
def test_every_probe_compiles_with_its_own_flags(tmp_path: Path, name: str) -> None:
    """Compiling needs no CPU support: every probe program must build with this compiler, so an
    extension is never dropped because its probe was written wrong."""
    import subprocess

    probe = isa.PROBES[name]
    src = tmp_path / "p.c"
    src.write_text(probe.source)
    done = subprocess.run(
        [isa.compiler(), "-O0", *probe.flags, "-c", str(src), "-o", str(tmp_path / "p.o")],
        capture_output=True,
        text=True,
        check=False,
    )
    if "unrecognized command-line option" in done.stderr or "unknown argument" in done.stderr:
        pytest.skip(f"this compiler does not know -m{name}")
    assert done.returncode == 0, done.stderr[-2000:]


def test_proc_cpuinfo_is_read_in_one_place(tmp_path: Path) -> None:
    """advertised_cpu: the model name and flags (x86) or Features (ARM) the kernel lists, the
    last processor's; nothing where there is no file. The fingerprint reads it through here."""
    x86 = tmp_path / "x86"
    x86.write_text(
        "processor\t: 0\nmodel name\t: Intel(R) Xeon(R)\nflags\t\t: fpu avx2 amx_tile\n\n"
        "processor\t: 1\nmodel name\t: Intel(R) Xeon(R)\nflags\t\t: fpu avx2 amx_tile fma\n"
    )
    assert isa.advertised_cpu(x86) == isa.AdvertisedCpu(
        "Intel(R) Xeon(R)", frozenset({"fpu", "avx2", "amx_tile", "fma"})
    )
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd sve\nCPU implementer\t: 0x41\n")
    assert isa.advertised_cpu(arm) == isa.AdvertisedCpu(None, frozenset({"fp", "asimd", "sve"}))
    assert isa.advertised_cpu(tmp_path / "none") == isa.AdvertisedCpu(None, frozenset())


def test_the_fingerprint_and_the_native_signature_read_the_same_cpu(monkeypatch) -> None:
    from quantbench import fingerprint

    cpu = isa.AdvertisedCpu("Some CPU", frozenset({"avx2", "fma", "sse4_2", "amx_tile"}))
    monkeypatch.setattr(isa, "advertised_cpu", lambda path=isa.CPUINFO: cpu)
    monkeypatch.setattr(fingerprint, "advertised_cpu", lambda path=isa.CPUINFO: cpu)
    signature = isa.cpu_signature()
    assert signature["model"] == "Some CPU"
    assert signature["isa_flags"] == ["amx_tile", "avx2", "fma", "sse4_2"]
    info = fingerprint.cpu_info()
    assert info.model == "Some CPU" and info.flags == ["avx2", "amx_tile", "fma"]
