"""The standalone host's Prometheus metrics (`wfrun host --metrics ADDR:PORT`, issue 40).

Every measurement the host takes goes through one `Metrics` object. The base class
does nothing, and `observe` hands the engine's observer back unchanged, so a host
without `--metrics` pays one empty method call per run and nothing per node;
`prometheus_client` is imported only when metrics are on.

- Counted where they happen: runs started (claimed to run or resume) and ended, by
  workflow and how they ended; lease losses; the claim latency of a launch's first
  start; node durations, from the run's trace events (the engine's observer).
- Counted by the trigger loop and the webhook ingress (the host's own threads, not
  its workers): trigger firings by outcome (launched, skipped, missed, failed; a
  gap of missed slots counts each slot) and webhook requests by outcome (accepted,
  replayed, refused, error).
- Read when scraped: the launch queue's depth by state (one grouped count) and the
  controller manager's passes (its own counter), so neither costs the loop anything.
- Worker processes (`--processes N`) count through `Forwarded`: each measurement is
  one message over the worker's report pipe, taken by the host's `Metrics`.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runner.engine._runtypes import Observer
from runner.engine._state import RunState
from runner.errors import InputError, OperationFailed
from runner.store import LAUNCH_STATUSES, LaunchBook, LaunchRecord, Store

if TYPE_CHECKING:  # the controller side: only a host that runs controllers loads it
    from runner.controllers import ControllerManager

log = logging.getLogger(__name__)

# The measurements a worker process may forward to its host (`Forwarded`).
FORWARDED = frozenset({"run_started", "claimed", "run_ended", "lease_lost", "node_ended"})
# Node and claim times span milliseconds (compute) to hours (agent steps, a full queue).
SECONDS_BUCKETS = (0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
                   3600.0)
NODE_ENDS = ("node_finished", "node_failed")


def first_claim_wait(record: LaunchRecord) -> float | None:
    """Seconds a just-claimed launch waited since `workflow start`, for its first claim
    only (epoch 1). A launch let go before it started (its host stopping) is claimed
    again with `started_at` still unset: counting by `started_at` counted it twice."""
    if record.epoch != 1:
        return None
    return (record.updated_at - record.created_at) / 1000


class Metrics:
    """What a host measures. This base measures nothing: metrics off."""

    enabled = False

    def run_started(self, workflow: str) -> None:
        """A run was claimed to start or to resume here."""

    def claimed(self, waited: float) -> None:
        """A launch was claimed for its first start, `waited` seconds after `workflow start`."""

    def run_ended(self, workflow: str, status: str) -> None:
        """A run this host executed ended (or parked, or failed to start)."""

    def lease_lost(self, workflow: str) -> None:
        """A run's claim was lost while it ran (its lease expired or was taken over)."""

    def node_ended(self, workflow: str, kind: str, outcome: str, seconds: float) -> None:
        """One node attempt ended (a retried attempt counts on its own)."""

    def webhook_delivery(self, trigger: str, outcome: str) -> None:
        """One request to the webhook ingress: accepted, replayed, refused or error
        (runtime/_webhooks.delivery_outcome); `trigger` empty when none matched."""

    def trigger_slots(self, trigger: str, outcome: str, slots: int) -> None:
        """This host's trigger loop recorded `slots` firings of `trigger` as launched,
        skipped, missed or failed."""

    def observe(self, observer: Observer | None) -> Observer | None:
        """The engine observer to use: `observer` itself when metrics are off."""
        return observer


class Forwarded(Metrics):
    """A worker process's metrics: each measurement goes to its host over `send`."""

    enabled = True

    def __init__(self, send: Callable[[tuple[Any, ...]], None]) -> None:
        self.send = send

    def run_started(self, workflow: str) -> None:
        self.send(("metric", "run_started", (workflow,)))

    def claimed(self, waited: float) -> None:
        self.send(("metric", "claimed", (waited,)))

    def run_ended(self, workflow: str, status: str) -> None:
        self.send(("metric", "run_ended", (workflow, status)))

    def lease_lost(self, workflow: str) -> None:
        self.send(("metric", "lease_lost", (workflow,)))

    def node_ended(self, workflow: str, kind: str, outcome: str, seconds: float) -> None:
        self.send(("metric", "node_ended", (workflow, kind, outcome, seconds)))

    def observe(self, observer: Observer | None) -> Observer | None:
        return node_observer(self, observer)


def take_forwarded(metrics: Metrics, name: str, args: tuple[Any, ...]) -> None:
    """A worker's forwarded measurement, taken by its host's `metrics`."""
    if name in FORWARDED:
        getattr(metrics, name)(*args)


def node_observer(metrics: Metrics, inner: Observer | None) -> Observer:
    """An engine observer that measures each node attempt's end, then calls `inner`."""
    def observe(event: dict[str, Any], state: RunState) -> None:
        if event["type"] in NODE_ENDS:
            payload = event.get("payload") or {}
            millis = payload.get("duration_ms")
            if isinstance(millis, int | float):
                outcome = payload.get("outcome") or (
                    "ok" if event["type"] == "node_finished" else "failed")
                metrics.node_ended(state.workflow, str(payload.get("kind") or ""),
                                   str(outcome), millis / 1000)
        if inner is not None:
            inner(event, state)

    return observe


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"


def parse_address(text: str, *, public: bool) -> Address:
    """`ADDR:PORT`, `:PORT` (loopback) or `PORT`; an address other than loopback only
    when `public` (the metrics carry workflow names and have no authentication)."""
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "", text
    host = host.strip("[]") or "127.0.0.1"
    if not port_text.isdigit() or int(port_text) > 65535:
        raise InputError(f"--metrics {text!r}: give ADDR:PORT with a port from 0 to 65535 "
                         "(0: a free one), e.g. 127.0.0.1:9464")
    if host != "localhost":
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            raise InputError(f"--metrics {text!r}: {host!r} is not an IP address; give one "
                             "(127.0.0.1 unless you also pass --metrics-public)") from None
        if not loopback and not public:
            raise InputError(f"--metrics {text!r} is not a loopback address: /metrics has no "
                             "authentication; pass --metrics-public to serve it there anyway")
    return Address(host, int(port_text))


class Prometheus(Metrics):
    """Metrics on: Prometheus counters and histograms in a registry of their own, served
    over HTTP by `serve`."""

    enabled = True

    def __init__(self, *, queue_depth: Callable[[], dict[str, int]] | None = None,
                 controller_passes: Callable[[], int] | None = None) -> None:
        try:
            import prometheus_client as prom
        except ImportError:
            raise OperationFailed("wfrun host --metrics needs prometheus-client, which is not "
                                  "installed: pip install --upgrade --force-reinstall wfrun"
                                  ) from None
        self.registry = prom.CollectorRegistry()
        prom.ProcessCollector(registry=self.registry)
        self.started = prom.Counter("wfrun_runs_started", "Runs claimed to start or resume",
                                    ["workflow"], registry=self.registry)
        self.ended = prom.Counter("wfrun_runs_ended", "Runs that ended, parked or failed to "
                                  "start, by how", ["workflow", "status"],
                                  registry=self.registry)
        self.lost = prom.Counter("wfrun_lease_losses", "Runs whose claim was lost while they "
                                 "ran", ["workflow"], registry=self.registry)
        self.claim_latency = prom.Histogram(
            "wfrun_claim_latency_seconds", "Seconds from `workflow start` to a host's claim "
            "(a launch's first start)", buckets=SECONDS_BUCKETS, registry=self.registry)
        self.node_duration = prom.Histogram(
            "wfrun_node_duration_seconds", "Seconds per node attempt",
            ["workflow", "kind", "outcome"], buckets=SECONDS_BUCKETS, registry=self.registry)
        self.deliveries = prom.Counter(
            "wfrun_webhook_deliveries", "Requests to the webhook ingress by outcome "
            "(accepted, replayed, refused, error)", ["trigger", "outcome"],
            registry=self.registry)
        self.slots = prom.Counter(
            "wfrun_trigger_slots", "Trigger firings this host recorded, by outcome "
            "(launched, skipped, missed, failed)", ["trigger", "outcome"],
            registry=self.registry)
        self.registry.register(_ScrapeTime(queue_depth, controller_passes))
        self._server: Any = None

    def run_started(self, workflow: str) -> None:
        self.started.labels(workflow).inc()

    def claimed(self, waited: float) -> None:
        self.claim_latency.observe(max(waited, 0.0))

    def run_ended(self, workflow: str, status: str) -> None:
        self.ended.labels(workflow, status).inc()

    def lease_lost(self, workflow: str) -> None:
        self.lost.labels(workflow).inc()

    def node_ended(self, workflow: str, kind: str, outcome: str, seconds: float) -> None:
        self.node_duration.labels(workflow, kind, outcome).observe(seconds)

    def webhook_delivery(self, trigger: str, outcome: str) -> None:
        self.deliveries.labels(trigger, outcome).inc()

    def trigger_slots(self, trigger: str, outcome: str, slots: int) -> None:
        self.slots.labels(trigger, outcome).inc(slots)

    def observe(self, observer: Observer | None) -> Observer | None:
        return node_observer(self, observer)

    def serve(self, address: Address) -> Address:
        """Serve /metrics on a daemon thread; the address bound (port 0: a free one)."""
        from prometheus_client import start_http_server

        try:
            server, _thread = start_http_server(address.port, addr=address.host,
                                                registry=self.registry)
        except OSError as exc:
            raise InputError(f"--metrics: cannot listen on {address.host}:{address.port}: "
                             f"{exc.strerror or exc}; pick another port") from None
        self._server = server
        return Address(address.host, int(server.server_address[1]))

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def for_host(store: Store, manager: ControllerManager | None) -> Prometheus:
    """A host's metrics: the queue's depth read from `store`, the passes of `manager`."""
    def depth() -> dict[str, int]:
        return {state: 0 for state in LAUNCH_STATUSES} | LaunchBook(store).counts()

    return Prometheus(queue_depth=depth,
                      controller_passes=None if manager is None else lambda: manager.passes)


class _ScrapeTime:
    """Values read when Prometheus scrapes: the queue's depth and the controller passes."""

    def __init__(self, queue_depth: Callable[[], dict[str, int]] | None,
                 controller_passes: Callable[[], int] | None) -> None:
        self.queue_depth = queue_depth
        self.controller_passes = controller_passes

    def describe(self) -> Iterator[Any]:
        return iter(())  # values depend on the store: never collected at registration

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        if self.queue_depth is not None:
            try:
                counts = self.queue_depth()
            except Exception as exc:  # the store is away: the scrape still answers
                log.debug("metrics: cannot count the launch queue: %s", exc)
            else:
                depth = GaugeMetricFamily("wfrun_queue_depth", "Launches in the queue by "
                                          "state", labels=["state"])
                for state, count in sorted(counts.items()):
                    depth.add_metric([state], count)
                yield depth
        if self.controller_passes is not None:
            yield CounterMetricFamily("wfrun_controller_passes", "Controller reconcile passes "
                                      "run by this host", value=self.controller_passes())
