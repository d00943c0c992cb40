"""Progress for long steps: what is running, and how long each step took."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger("quantbench")


def setup_logging(level: int = logging.INFO) -> None:
    """Timestamped lines on stderr, so DVC's output shows what each stage is doing."""
    logging.basicConfig(
        level=level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname).1s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )


@contextmanager
def step(name: str, timings: dict[str, float] | None = None) -> Iterator[None]:
    """Log the start and end of a step with its wall time; record it in `timings` if given."""
    log.info("%s ...", name)
    start = time.perf_counter()
    yield
    elapsed = time.perf_counter() - start
    if timings is not None:
        timings[name] = round(elapsed, 3)
    log.info("%s done in %.1f s", name, elapsed)
