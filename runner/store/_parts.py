"""`part`: a store attribute built on first use (issue 34 item 11, cold start).

A store has a dozen parts (the trigger ledger, fan-out items, the controller side's
queues, ...), each a module with its own records. `wfrun status` touches one of them;
building them all with the store imported every module on every command. A part is
built, with its module imported, when first read, and then held in the store's own
`__dict__`, so later reads are plain attribute reads (the descriptor is a non-data
one, as `functools.cached_property`). The first read takes the store's lock: one
store is shared by threads, and each part must exist once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")

#: One lock for every store's first reads: they happen once per part per store.
_FIRST_READ = threading.RLock()  # reentrant: a part may read another while built


class part(Generic[T]):
    """Decorates a method that builds one part of the store from `self`."""

    def __init__(self, build: Callable[[Any], T]) -> None:
        self._build = build
        self._name = build.__name__
        self.__doc__ = build.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> part[T]: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...

    def __get__(self, obj: object | None, owner: type | None = None) -> T | part[T]:
        if obj is None:
            return self
        held = vars(obj)
        with _FIRST_READ:
            if self._name not in held:  # another thread may have built it meanwhile
                held[self._name] = self._build(obj)
            value: T = held[self._name]
        return value
