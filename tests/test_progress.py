"""Progress a person can read (quantbench.progress): in a log, a few lines per step instead of a
line per progress-bar update; on a terminal, the bars as the libraries draw them."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# A stage's shape: logging set up first, then a library's bars (llm-compressor's AWQ grid search
# sets a postfix at every ratio: a line each, whatever tqdm's interval), then a long step.
STAGE = textwrap.dedent("""
    import time
    from quantbench.progress import setup_logging, step
    setup_logging()
    from tqdm import tqdm
    for layer in range(30):
        bar = tqdm(range(20), desc=f"Grid search for model.layers.{layer}", leave=False)
        for ratio in bar:
            bar.set_postfix({"best_error": f"{ratio:.3e}"})
    with step("variant awq: awq", heartbeat_s=0.3):
        time.sleep(1.1)
    print("TQDM_DISABLE=" + __import__("os").environ.get("TQDM_DISABLE", "-"), flush=True)
""")


def _env(**extra: str) -> dict[str, str]:
    # as a stage under DVC sees it: none of pytest's variables (LogBar draws everything under
    # pytest), nor any progress setting of the caller's
    drop = ("PYTEST_", "TQDM_", "LOGBAR_", "HF_HUB_DISABLE_PROGRESS_BARS")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PYTHONPATH"] = str(REPO / "src")
    env["TERM"] = "xterm-256color"
    return {**env, **extra}


def on_a_terminal(code: str, columns: int = 120) -> str:
    """What ``code`` writes, run with a terminal (a pty) for its stdout and stderr, read as it
    writes (a full pty would block the child)."""
    leader, follower = pty.openpty()
    # a terminal of some columns (a new pty has none, and tqdm draws nothing in 0 columns)
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    try:
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=follower, stderr=follower,
                                env=_env())  # fmt: skip
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal's other end closed: the process is done
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert proc.wait(timeout=120) == 0
    finally:
        os.close(leader)
    return b"".join(chunks).decode(errors="replace")


def test_a_stage_writing_to_a_log_writes_a_few_lines_per_step(tmp_path: Path) -> None:
    log = tmp_path / "stage.log"
    with log.open("w") as out:
        subprocess.run([sys.executable, "-c", STAGE], stdout=out, stderr=subprocess.STDOUT,
                       env=_env(), check=True, timeout=120)  # fmt: skip
    text = log.read_text()
    lines = text.replace("\r", "\n").splitlines()
    assert "Grid search" not in text, lines[:5]  # 600 bar lines before
    beats = [line for line in lines if "variant awq: awq: still running" in line]
    assert len(beats) >= 2, lines  # the step says it is running, about every heartbeat
    assert any("variant awq: awq done in" in line for line in lines)
    assert len(lines) <= 10, lines


def test_the_bars_stay_in_a_log_when_asked(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", STAGE], capture_output=True, text=True,
                          env=_env(QUANTBENCH_LOG_BARS="1"), check=True, timeout=120)  # fmt: skip
    assert "TQDM_DISABLE=-" in done.stdout
    assert done.stderr.count("Grid search") >= 30  # their bars, as asked


def test_on_a_terminal_the_bars_are_the_libraries_own(tmp_path: Path) -> None:
    text = on_a_terminal(STAGE)
    assert "Grid search for model.layers.29" in text and "TQDM_DISABLE=-" in text
    assert "still running" not in text  # the bars show it


# llm-compressor's logger as its import makes it: loguru, a handler on stdout at INFO, a METRIC
# level at 38 (a line per quantized module's error), and the same warning at every module
LOGURU_STAGE = textwrap.dedent("""
    import sys
    from quantbench.progress import quiet_chatty_loggers, setup_logging
    setup_logging()
    from loguru import logger
    logger.remove()
    logger.add(sys.stdout, level="INFO")
    logger.level("METRIC", no=38)
    quiet_chatty_loggers()
    for module in range(190):
        logger.info(f"Compressing model.layers.{module}")
        logger.log("METRIC", f"error {module}")
        logger.warning("No accelerator available! Compressing model on CPU instead")
    logger.warning("a different warning")
    logger.error("an error")
""")


def test_llm_compressor_s_loguru_lines_in_a_log_are_its_warnings_once_each(tmp_path: Path) -> None:
    log = tmp_path / "stage.log"
    with log.open("w") as out:
        subprocess.run([sys.executable, "-c", LOGURU_STAGE], stdout=out, stderr=subprocess.STDOUT,
                       env=_env(), check=True, timeout=120)  # fmt: skip
    lines = log.read_text().splitlines()
    assert sum("No accelerator available" in line for line in lines) == 1, lines[:5]
    assert any("a different warning" in line for line in lines)
    assert any("an error" in line for line in lines)
    assert not any("Compressing model.layers" in line or "error 1" in line for line in lines)
    assert len(lines) == 3, lines


def test_on_a_terminal_llm_compressor_s_loguru_lines_are_its_own(tmp_path: Path) -> None:
    text = on_a_terminal(LOGURU_STAGE)
    assert text.count("No accelerator available") == 190
    assert "Compressing model.layers.189" in text
