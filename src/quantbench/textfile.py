"""Reading the text files a user gives (params.yaml, the data files): UTF-8, or an error that says
where it is not and how to fix it.

Python's own error ("'utf-8' codec can't decode byte 0xe9 in position 5") names neither the file
nor the line, and reaches the user as a traceback. Every reader of a user's text file goes
through :func:`read_utf8`, so a file saved in Latin-1 or UTF-16 by an editor is refused the same
way wherever it is read, before any work.
"""

from __future__ import annotations

from pathlib import Path

from quantbench.errors import UserError


class NotUtf8Error(UserError):
    """A text file the user gave is not UTF-8."""


def read_utf8(path: str | Path, key: str) -> str:
    """``path``'s text; NotUtf8Error naming ``key``, the line and column of the first byte that is
    not UTF-8, and the command that converts the file."""
    path = Path(path)
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        hint = "UTF-16 (an editor's 'Unicode')" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else ""
        raise NotUtf8Error(
            f"{key}: {path} is not UTF-8 text{f', it looks like {hint}' if hint else ''}: byte "
            f"0x{data[exc.start]:02x} at line {line}, column {column}; save it as UTF-8 (e.g. "
            f"`iconv -f latin1 -t utf-8 {path} > {path.name}.utf8 && mv {path.name}.utf8 {path}`)"
        ) from None
