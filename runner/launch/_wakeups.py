"""A host's wake-up listener: a thread blocked on the store's notices.

`LaunchListener` turns the store's wake-up source (`runner.store._wakeups`) into one
call of `wake()` per batch of notices, so the host's idle wait (on a threading
event it already sets when a run ends) also ends when a launch becomes claimable
elsewhere. It listens before the host's first claim, so a launch enqueued between a
claim that found nothing and the wait still wakes it. A lost connection is logged
once, retried every `retry` seconds, and followed by one `wake()` when listening
again: notices sent while it was down are gone, so the host claims once to catch
up. Nothing here is needed for correctness; the host's poll still runs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from runner.store import StoreError
from runner.store._wakeups import Wakeups

log = logging.getLogger(__name__)
#: How long one wait blocks: the bound on how late the thread sees `stop`.
WAIT_SLICE = 0.5


class LaunchListener:
    def __init__(self, wakeups: Wakeups, wake: Callable[[], None], *,
                 retry: float = 1.0) -> None:
        self._wakeups = wakeups
        self._wake = wake
        self._retry = retry
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.notices = 0  # ids received (tests and benches read it)
        self.reconnects = 0

    def start(self) -> None:
        """Listen (connect and LISTEN) now, then wait on a daemon thread. A store that
        cannot be reached now is retried by the thread."""
        lost = self._listen_once(0.0)
        self._thread = threading.Thread(target=self._loop, args=(lost,), daemon=True,
                                        name="wfrun-wakeups")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=WAIT_SLICE * 4)
        self._wakeups.close()

    def _listen_once(self, timeout: float) -> str | None:
        """One wait; None when it worked, else the error's message."""
        try:
            ids = self._wakeups.wait(timeout)
        except StoreError as exc:
            return exc.message
        if ids:
            self.notices += len(ids)
            self._wake()
        return None

    def _loop(self, lost: str | None) -> None:
        if lost is not None:
            log.warning("wfrun host: cannot listen for launches (%s); polling until it can",
                        lost)
        while not self._stop.is_set():
            if lost is not None and self._stop.wait(self._retry):
                return
            error = self._listen_once(WAIT_SLICE)
            if error is None and lost is not None:
                log.warning("wfrun host: listening for launches again")
                self.reconnects += 1
                self._wake()  # notices sent while it was down are lost: claim once
            elif error is not None and lost is None:
                log.warning("wfrun host: lost the launch notices (%s); polling until "
                            "they are back", error)
            lost = error
