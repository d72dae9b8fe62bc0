"""Package names that load on first use (PEP 562), for the cold start (issue 15).

A package lists which submodule defines each public name; `lazy_names` returns the
module-level `__getattr__` and `__dir__` that import it when a name is first read
and cache it in the package's globals. Standard library only.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # no typing at run time: `wfrun mcp`'s start path uses this
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any


def lazy_names(package: str, table: Mapping[str, str]
               ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """(`__getattr__`, `__dir__`) for `package`, whose `table` maps name -> submodule."""

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        # __import__, not importlib.import_module: only the former is listed by
        # `python -X importtime`, the tool that shows what a command loads.
        __import__(f"{package}.{module}")
        value = getattr(sys.modules[f"{package}.{module}"], name)
        vars(sys.modules[package])[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(table))

    return __getattr__, __dir__
