"""Progress for long steps: what is running, and how long each step took.

And the libraries' own progress bars, made readable where nobody watches them: in a log (a DVC
run's output piped to a file, CI) every tqdm update is a line, and one AWQ stage wrote 3,567 of
them (1.5 MB for one `make repro`): llm-compressor draws a bar per layer and per step of each
layer (calibrate, propagate, smooth, and a grid search whose every ratio prints), and GPTQModel
a table per module. When stderr is not a terminal, :func:`setup_logging` turns tqdm's bars off
(`TQDM_DISABLE`, `HF_HUB_DISABLE_PROGRESS_BARS`: read when the libraries are imported, which the
stages do later, in their functions), sends GPTQModel's log to warnings only and its bars off
(`TERM=dumb`: the output is no terminal, whatever the shell's TERM said), and llm-compressor's
loguru lines to its warnings, each once (not its per-module INFO and METRIC lines, nor the same
warning at every module); in their place each
:func:`step` says every minute that it is still running. ``QUANTBENCH_LOG_BARS=1`` keeps the bars
in logs too. On a terminal nothing changes (bars update in place). A variable the user set is
kept. Only a stage's entry point (:func:`setup_logging`) changes the process's environment; the
library calls :func:`quiet_chatty_loggers` after importing a chatty library.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger("quantbench")


# In a log, a step still running says so this often (its own line, instead of the bars')
HEARTBEAT_S = 60.0
_in_log = False
# set (to anything but 0) to keep the libraries' bars in logs too
KEEP_BARS_ENV = "QUANTBENCH_LOG_BARS"
# GPTQModel's logger (the LogBar package): a table per quantized module at INFO
THIRD_PARTY_CHATTY = ("logbar",)
LOG_ENV = {
    # tqdm's bars (transformers, datasets, llm-compressor): none (a bar's `set_postfix` prints
    # whatever its interval: AWQ's grid search, a line per ratio of each of ~120 searches)
    "TQDM_DISABLE": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    # LogBar's bars and spinners (GPTQModel's layers and modules): no animation, and a bar drawn
    # again only every this many updates (it reads these when first used)
    "LOGBAR_ANIMATION": "0",
    "LOGBAR_PROGRESS_OUTPUT_INTERVAL": "1000",
}


def quiet_bars_in_logs(stream: object = None) -> bool:
    """Set tqdm's and GPTQModel's output for a log when ``stream`` (stderr) is not a terminal;
    True when it did."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    if (isatty is not None and isatty()) or os.environ.get(KEEP_BARS_ENV, "") not in ("", "0"):
        return False
    global _in_log
    _in_log = True
    for name, value in LOG_ENV.items():
        os.environ.setdefault(name, value)
    # what this process writes to is no terminal, whatever the shell's TERM says: LogBar (and
    # other libraries) then draw no bars (LogBar's headless mode; it still draws under pytest)
    os.environ["TERM"] = "dumb"
    for name in THIRD_PARTY_CHATTY:
        logging.getLogger(name).setLevel(logging.WARNING)
    return True


def quiet_chatty_loggers() -> None:
    """After importing a library that makes its logger at INFO when imported (GPTQModel's LogBar,
    llm-compressor's loguru): its log to warnings only, where :func:`setup_logging` found a log
    rather than a terminal. Nothing otherwise: a library call does not change its caller's
    output."""
    if _in_log:
        for name in THIRD_PARTY_CHATTY:
            logging.getLogger(name).setLevel(logging.WARNING)
        if "loguru" in sys.modules:
            _loguru_warnings_once()


def _loguru_warnings_once() -> None:
    """llm-compressor logs through loguru (its own handler on stdout, made at its import): in a
    log, its warnings and errors on stderr, each distinct message once. One default run's log had
    about 630 of its INFO and METRIC lines (METRIC, its level 38, a line per module's GPTQ error)
    and 190 times the same "No accelerator available" warning."""
    from loguru import logger

    seen: set[tuple[str, str]] = set()

    def once(record: dict) -> bool:  # type: ignore[type-arg]
        if record["level"].name == "METRIC":
            return False
        key = (record["level"].name, record["message"])
        if key in seen:
            return False
        seen.add(key)
        return True

    logger.remove()
    logger.add(
        sys.stderr, level="WARNING", filter=once,  # type: ignore[arg-type]
        format="{time:HH:mm:ss} {level: <7} {name}: {message}",
    )  # fmt: skip


def setup_logging(level: int = logging.INFO) -> None:
    """Timestamped lines on stderr, so DVC's output shows what each stage is doing (and the
    libraries' progress bars readable there: :func:`quiet_bars_in_logs`)."""
    quiet_bars_in_logs()
    logging.basicConfig(
        level=level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname).1s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )


@contextmanager
def step(
    name: str, timings: dict[str, float] | None = None, heartbeat_s: float | None = None
) -> Iterator[None]:
    """Log the start and end of a step with its wall time; record it in `timings` if given.
    In a log (:func:`quiet_bars_in_logs`), a line every ``heartbeat_s`` (default HEARTBEAT_S)
    while it runs, in place of the libraries' bars."""
    log.info("%s ...", name)
    start = time.perf_counter()
    done = threading.Event()
    beat = HEARTBEAT_S if heartbeat_s is None else heartbeat_s
    if _in_log and beat > 0:

        def heartbeat() -> None:
            while not done.wait(beat):
                log.info("%s: still running, %.0f s so far", name, time.perf_counter() - start)

        threading.Thread(target=heartbeat, name="progress-heartbeat", daemon=True).start()
    try:
        yield
    finally:
        done.set()
    elapsed = time.perf_counter() - start
    if timings is not None:
        timings[name] = round(elapsed, 3)
    log.info("%s done in %.1f s", name, elapsed)
