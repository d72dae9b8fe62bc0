"""Compiled dataclass methods, kept between processes (issue 37).

Each `@dataclass` compiles the source of its generated methods (`__init__`, `__eq__`,
`__repr__`, a frozen class's `__setattr__`...) with `exec`: ~0.3 ms a class, ~30 ms
of a host's ~130 ms start-up over the ~90 classes it loads. The source is the same
each run, so the compiled code is kept, keyed by that source, in a marshal file
beside runner's bytecode (interpreter-specific, as a .pyc is) and reused: the same
text compiles to the same code, so every class comes out as it would have. A miss
compiles as before and is added to the file when the process exits; a file that
cannot be read or written only costs the compiles (as `PYTHONDONTWRITEBYTECODE`
skips the write, as it does for .pyc files).
"""

from __future__ import annotations

import atexit
import contextlib
import marshal
import os
import sys
from types import CodeType
from typing import Any

PATH = os.path.join(os.path.dirname(__file__), "__pycache__",
                     f"dataclasses.{sys.implementation.cache_tag}.marshal")


class Codes:
    """The kept code of one file: `exec` stands in for the builtin in `dataclasses`."""

    #: Past this many kept methods a save keeps only this process's: classes made with
    #: changing source (make_dataclass with generated names) cannot grow the file forever.
    limit = 4096

    def __init__(self, path: str) -> None:
        self.path = path
        self.codes: dict[str, CodeType] = {}
        self.added = 0
        self.used: set[str] = set()
        try:
            with open(path, "rb") as fh:
                loaded = marshal.loads(fh.read())  # load(fh) reads object by object: ~8x slower
        except (OSError, EOFError, ValueError, TypeError):
            return
        # The interpreter's full version: a code object is only good for the one that made it.
        if isinstance(loaded, tuple) and len(loaded) == 2 and loaded[0] == sys.version \
                and isinstance(loaded[1], dict):
            self.codes = {k: v for k, v in loaded[1].items()
                          if isinstance(k, str) and isinstance(v, CodeType)}

    def exec(self, source: str | CodeType, globals: dict[str, Any] | None = None,
             locals: dict[str, Any] | None = None) -> None:
        if isinstance(source, str):  # the generated text (dataclasses passes nothing else)
            code = self.codes.get(source)
            if code is None:
                code = compile(source, "<string>", "exec")
                self.codes[source] = code
                self.added += 1
            self.used.add(source)
            source = code
        exec(source, globals, locals)

    def save(self) -> None:
        if not self.added or sys.dont_write_bytecode:
            return
        kept = self.codes if len(self.codes) <= self.limit \
            else {source: self.codes[source] for source in self.used}
        temp = f"{self.path}.{os.getpid()}.tmp"
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            with open(temp, "wb") as fh:
                fh.write(marshal.dumps((sys.version, kept)))
            os.replace(temp, self.path)  # whole or not at all: a reader never sees half
        except OSError:  # a read-only install: the next process compiles again
            with contextlib.suppress(OSError):
                os.unlink(temp)


def install(path: str = PATH) -> Codes:
    """Route `dataclasses`' own `exec` calls (its module globals are looked up before
    the builtins) through the kept code; once per process (the first call's file)."""
    import dataclasses  # here, not at the top: `wfrun --help` loads no dataclasses

    codes = getattr(dataclasses, "_wfrun_codes", None)
    if isinstance(codes, Codes):
        return codes
    codes = Codes(path)
    dataclasses.exec = codes.exec  # type: ignore[attr-defined]
    dataclasses._wfrun_codes = codes  # type: ignore[attr-defined]
    atexit.register(codes.save)
    return codes
