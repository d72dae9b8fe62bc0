"""Issue 40: a real `wfrun host --metrics --listen` counts its trigger firings
(launched, missed) and its webhook requests (accepted, replayed, refused) exactly;
/metrics is parsed with Prometheus' own parser after a known set of events. Time
comes from a shared clock file the test moves."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families
from standalonekit import Project, wait_for
from test_host_triggers import HOURLY, _launched, _state
from test_webhooks import HOOKED, SECRET, post

from runner.clock import CLOCK_FILE_ENV, FileClock

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Samples:
    text = httpx.get(url, timeout=10).text
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def counted(samples: Samples, name: str) -> dict[tuple[str, str], float]:
    """(trigger, outcome) -> value of one counter."""
    return {(dict(labels)["trigger"], dict(labels)["outcome"]): v
            for (n, labels), v in samples.items() if n == name}


def test_trigger_slots_and_webhook_deliveries_are_counted_exactly(
        project: Project, tmp_path: Path) -> None:
    project.workflow("hourly", HOURLY)
    project.workflow("hooked", HOOKED)
    start = datetime(2030, 1, 1, 10, 30, tzinfo=UTC).timestamp()
    clock = FileClock.create(tmp_path / "clock", start)
    host = project.host("--metrics", "127.0.0.1:0", "--listen", "127.0.0.1:0",
                        PUSH_SECRET=SECRET, **{CLOCK_FILE_ENV: clock.path})
    project.wait_host_ready(host)
    def addresses() -> tuple[str, str] | None:
        text = project.stderr_of(host)
        served = re.search(r"metrics on (http://\S+)", text)
        hooked = re.search(r"webhooks on (http://\S+)", text)
        return (served.group(1), hooked.group(1)) if served and hooked else None

    metrics, hooks = wait_for("the addresses", addresses)
    wait_for("the host to see the trigger", lambda: _state(project) is not None)

    clock.set(start + 30 * 60 + 5)  # 11:00:05: the 11:00 slot fires
    wait_for("the 11:00 firing", lambda: len(_launched(project, "hourly", "hourly")) == 1)
    clock.set(start + 4 * 3600 + 50 * 60)  # 15:20: 12:00-15:00 due; missed: last
    wait_for("the 15:00 catch-up", lambda: len(_launched(project, "hourly", "hourly")) == 2)

    with httpx.Client(timeout=30) as client:
        assert post(client, f"{hooks}/hooks/push", "gh-1", {"ref": "a"}).status_code == 202
        assert post(client, f"{hooks}/hooks/push", "gh-2", {"ref": "b"}).status_code == 202
        assert post(client, f"{hooks}/hooks/push", "gh-1", {"ref": "a"}).status_code == 200
        assert post(client, f"{hooks}/hooks/push", "gh-3", {"ref": "c"},
                    secret="wrong").status_code == 401
        assert post(client, f"{hooks}/hooks/nowhere", "gh-4", {}).status_code == 404

    want_slots = {("hourly/hourly", "launched"): 2.0, ("hourly/hourly", "missed"): 3.0,
                  ("hooked/push", "launched"): 2.0}
    samples = wait_until_counted(metrics, want_slots)
    assert counted(samples, "wfrun_trigger_slots_total") == want_slots
    assert counted(samples, "wfrun_webhook_deliveries_total") == {
        ("hooked/push", "accepted"): 2.0, ("hooked/push", "replayed"): 1.0,
        ("hooked/push", "refused"): 1.0, ("", "refused"): 1.0}
    host.terminate()
    host.wait(timeout=30)


def wait_until_counted(url: str, want: dict[tuple[str, str], float]) -> Samples:
    """The scrape once the slot counts reached `want` (each settles just after its
    firing's row, which the test waited on)."""
    return wait_for("the slot counts", lambda: (
        s := scrape(url)) and counted(s, "wfrun_trigger_slots_total") == want and s)
