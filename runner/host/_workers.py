"""Worker processes of a standalone host (`wfrun host --processes N`).

Why: one process runs Python on one core at a time (the GIL). A host's slots are
threads, so with four slots the host spends its CPU handing the GIL between them and
never uses the machine's other cores; runs per second stay where one core leaves them.
Worker processes each claim from the store and run their share of the slots, so N
processes use up to N cores. The store already makes that safe: every claim is a
conditional update with a token and a lease, and SQLite writers take turns across
processes (store/sqlite/_writelock.py).

How:
- The host forks its workers once, right after it takes the project's host lock and
  before it starts any thread of its own (a fork copies only the forking thread, so
  nothing can be caught half-way through a lock). Each worker opens its own store
  (a connection must never cross a fork) and records its shell process groups in its
  own registry, so the next host reaps them if the worker dies.
- A worker runs the same claim loop as the host, without the host lock, the
  controllers or the source watch (those stay in the host). It reports each run it
  starts and ends over a pipe; the host counts them in its report and calls its
  `on_run_ended` for them, as for its own runs.
- Stopping: the host writes to each worker's control pipe, and the worker parks its
  in-flight runs at their next safe point and exits. A worker whose host dies (even
  by SIGKILL) reads end-of-file on that pipe and does the same, so no worker runs on
  without its host. A worker ignores SIGINT (a terminal's Ctrl-C reaches the whole
  process group; its host decides) and parks on SIGTERM.
- A worker that dies leaves its claimed runs to lease expiry, as any dead runner
  does: the host logs one line, reaps the worker's shell process groups and goes on
  with its other processes.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import threading
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.clock import Clock
from runner.engine import RunOutcome
from runner.engine._processes import reap_dead_registries
from runner.errors import WfrunError

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from .runtime._local import Workspace

log = logging.getLogger(__name__)

#: Extra seconds a stopping worker gets beyond the host's own park deadline (it parks
#: its runs against the same deadline, then has to exit) before it is killed.
EXIT_GRACE = 2.0


def shares(slots: int, processes: int) -> list[int]:
    """How `slots` split over `processes` (the host's share first): as even as can be,
    every process at least one."""
    if not 1 <= processes <= slots:
        raise ValueError(f"processes must be 1..{slots} (one slot each at least)")
    base, extra = divmod(slots, processes)
    return [base + (1 if i < extra else 0) for i in range(processes)]


# What a worker tells its host: ("started", run_id), ("ended", run_id, outcome),
# ("failed", error) or ("metric", name, args) (a measurement, host/_metrics.py).
Message = tuple[Any, ...]
# A worker's work: given how to report and its control fd, run until told to stop.
Body = Callable[[Callable[[Message], None], int], None]


@dataclass
class Worker:
    pid: int
    reports: Connection  # the host's end: what the worker sends
    control: int  # the host's end (a write fd): a byte or EOF stops the worker
    reader: threading.Thread | None = None
    status: int | None = None  # its wait status, once reaped


def _ignore(*_args: Any) -> None:
    pass


class WorkerPool:
    """The worker processes of one host run, from fork to their last report."""

    def __init__(self, children_dir: Path, *, clock: Clock) -> None:
        self.children_dir = children_dir  # the workers' registries (reaped if one dies)
        self.clock = clock
        self.on_started: Callable[[str], None] = _ignore
        self.on_ended: Callable[[str, RunOutcome | None], None] = _ignore
        self.on_failed: Callable[[WfrunError], None] = _ignore
        self.on_metric: Callable[[str, tuple[Any, ...]], None] = _ignore
        self.failure: WfrunError | None = None  # the first error a worker stopped on
        self.workers: list[Worker] = []
        self.reaped: list[int] = []  # process groups reaped before the fork

    def fork(self, body: Body) -> None:
        """Fork one worker, which calls `body(send, control)` and exits with its status
        (`control`: the fd `watch_control` waits on). Only before this process starts
        a thread or opens the store (then `start_reading`)."""
        from multiprocessing.connection import Pipe  # a host of one process forks none

        reports_r, reports_w = Pipe(duplex=False)
        control_r, control_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker
            reports_r.close()
            os.close(control_w)
            for other in self.workers:  # its siblings' pipes are not its own
                other.reports.close()
                os.close(other.control)
            os._exit(_worker_main(body, reports_w, control_r))
        reports_w.close()
        os.close(control_r)
        self.workers.append(Worker(pid, reports_r, control_w))

    def start_reading(self) -> None:
        """One thread per worker takes its reports (after the last fork, once the
        handlers are set: a report read before would be lost)."""
        for worker in self.workers:
            worker.reader = threading.Thread(target=self._read, args=(worker,), daemon=True,
                                             name=f"wfrun-host-worker-pid-{worker.pid}")
            worker.reader.start()

    def _read(self, worker: Worker) -> None:
        while True:
            try:
                message = worker.reports.recv()
            except (EOFError, OSError):
                break
            except Exception:  # one report that will not unpickle: the next ones still do
                log.exception("wfrun host: cannot read a report of worker %s", worker.pid)
                continue
            try:
                if message[0] == "started":
                    self.on_started(message[1])
                elif message[0] == "ended":
                    self.on_ended(message[1], message[2])
                elif message[0] == "metric":
                    self.on_metric(message[1], message[2])
                elif message[0] == "failed":
                    if self.failure is None:
                        self.failure = message[1]
                    self.on_failed(message[1])
            except Exception:  # a report problem never ends the host
                log.exception("wfrun host: cannot take a report of worker %s", worker.pid)
        worker.reports.close()
        _, worker.status = os.waitpid(worker.pid, 0)
        if worker.status != 0:
            how = (f"signal {os.WTERMSIG(worker.status)}" if os.WIFSIGNALED(worker.status)
                   else f"exit status {os.WEXITSTATUS(worker.status)}")
            log.warning("wfrun host: worker process %s ended (%s); the runs it held are "
                        "recovered once their leases expire", worker.pid, how)
            # Its shell process groups would run on with nobody to wait for them.
            reap_dead_registries(self.children_dir)

    def stop(self) -> None:
        """Ask every worker to park its runs and exit (once is enough; again is harmless)."""
        for worker in self.workers:
            with suppress(OSError):  # it is gone already
                os.write(worker.control, b"s")

    def finish(self, stopping: threading.Event, grace: float) -> None:
        """Wait for every worker's last report: while draining (`--once`) for as long as
        they work, and once `stopping` is set, `grace` seconds more at most; a worker
        still running then is killed (its leases bring its runs back)."""
        deadline: float | None = None
        for worker in self.workers:
            assert worker.reader is not None
            while worker.reader.is_alive():
                if deadline is None and stopping.is_set():
                    self.stop()
                    deadline = self.clock.monotonic() + grace
                if deadline is not None and self.clock.monotonic() >= deadline:
                    log.warning("wfrun host: worker process %s did not stop in time; "
                                "killed", worker.pid)
                    with suppress(ProcessLookupError):
                        os.kill(worker.pid, signal.SIGKILL)
                    worker.reader.join()
                    break
                # Short waits: a stop asked for meanwhile (Ctrl-C) is seen at once.
                worker.reader.join(0.05 if deadline is None else 0.01)
            os.close(worker.control)
        self.workers.clear()


def store_is_open(ws: Workspace) -> bool:
    """Whether this process has the project's SQLite store file open (Linux: its fds)."""
    from .runtime._local import store_path

    try:
        target = os.path.realpath(store_path(ws))
        fds = os.listdir("/proc/self/fd")
    except (OSError, ValueError):
        return False
    for fd in fds:
        with suppress(OSError):
            if os.readlink(f"/proc/self/fd/{fd}").removesuffix(" (deleted)") in (
                    target, target + "-wal", target + "-shm"):
                return True
    return False


def _worker_main(body: Body, reports: Connection, control: int) -> int:
    """A forked worker: run `body`, report over `reports`, stop when `control` says."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        lock = threading.Lock()

        def send(message: Message) -> None:
            with lock:
                try:
                    reports.send(message)
                except (OSError, ValueError):  # the host is gone: the control pipe says so
                    pass
                except Exception:  # an outcome that will not pickle: the facts that matter
                    reports.send((*message[:2], _plain(message[2])))

        body(send, control)
        return 0
    except BaseException:  # the worker's last word, then its status
        log.exception("wfrun host: worker process %s failed", os.getpid())
        return 70
    finally:
        reports.close()  # the host's reader sees the end; os._exit closes the rest


def portable(error: WfrunError) -> WfrunError:
    """`error` if it survives a trip through pickle, else a plain one with its message
    and exit code (the host raises what it gets)."""
    try:
        back = pickle.loads(pickle.dumps(error))
    except Exception:
        back = None
    if type(back) is type(error) and getattr(back, "message", None) == error.message:
        return error
    plain = WfrunError(error.message)
    plain.exit_code = error.exit_code
    return plain


def _plain(outcome: RunOutcome | None) -> RunOutcome | None:
    if outcome is None:
        return None
    from runner.engine._state import RunState

    return RunOutcome(outcome.run_id, outcome.status, outcome.parked, None, outcome.error,
                      RunState(run_id=outcome.run_id, status=outcome.state.status),
                      outcome.park_reason)


def watch_control(control: int, stop: Callable[[], None]) -> threading.Thread:
    """In a worker: call `stop` once its host asks, or dies (end of file)."""
    def wait() -> None:
        with suppress(OSError):
            os.read(control, 1)
        stop()

    thread = threading.Thread(target=wait, daemon=True, name="wfrun-host-worker-control")
    thread.start()
    return thread
