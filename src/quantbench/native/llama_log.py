"""llama.cpp's own log, kept out of a stage's output while a library call runs in this process.

llama.cpp writes its log to stderr unless given a callback: its model loader's metadata (a line
per key, about 40) and, while quantizing, a line per tensor and a warning per tensor that falls
back to another type. One default run's two GGUF quantize stages wrote about 800 such lines into
its log, where a person wants a line or two per step. :func:`captured` gives llama.cpp a callback
that keeps the text in memory for the length of a ``with`` block and puts the previous callback
back afterwards (``llama_log_get``/``llama_log_set``, the library's own API); the caller says
what mattered in a line of its own and keeps the whole text for an error or the debug log.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import ModuleType

_lock = threading.Lock()  # the logger state is global in llama.cpp: one capture at a time


@dataclass
class CapturedLog:
    """What llama.cpp logged inside :func:`captured`'s block."""

    chunks: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.chunks)

    def lines(self) -> list[str]:
        return self.text.splitlines()

    def tail(self, count: int = 30) -> str:
        return "\n".join(self.lines()[-count:])


@contextmanager
def captured(binding: ModuleType) -> Iterator[CapturedLog]:
    """llama.cpp's log (through ``binding``, llama-cpp-python's ctypes module) into the returned
    :class:`CapturedLog` instead of stderr, until the block ends."""
    log = CapturedLog()

    def sink(level: int, text: bytes | None, user_data: ctypes.c_void_p) -> None:
        if text:
            log.chunks.append(text.decode("utf-8", "replace"))

    callback = binding.llama_log_callback(sink)  # kept referenced until restored below
    with _lock:
        previous = binding.llama_log_callback()
        previous_data = ctypes.c_void_p()
        binding.llama_log_get(ctypes.byref(previous), ctypes.byref(previous_data))
        binding.llama_log_set(callback, ctypes.c_void_p(0))
        try:
            yield log
        finally:
            binding.llama_log_set(previous, previous_data)
