"""Issue 38: the console's triggers page and `/api/triggers` — each trigger with its
policy, last and next firing, skipped and missed slots and paused state, the same
rows `wfrun triggers --json` prints — and pause/resume through the console's
token, CSRF and audit path. A real `wfrun ui` subprocess on a fake clock (a file
clock shared with the CLI), firings recorded through the real store."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_ui_api import bearer, token_of
from test_ui_console import confirm, with_cookie
from uikit import Project, UiServer, ui_server

from runner.clock import CLOCK_FILE_ENV, FileClock
from runner.store import SqliteStore

REPORT = """\
triggers:
  nightly: {cron: "0 3 * * *", timezone: Europe/Berlin, missed: none}
  often: {every: 30s, overlap: skip}
start: a
nodes:
  a: {action: {shell: [echo, hi]}}
"""
HOOKED = """\
triggers:
  push: {webhook: {path: /hooks/push, secret: HOOK_SECRET}}
start: a
nodes:
  a: {compute: "{{ 1 }}"}
"""
NOON = datetime(2027, 1, 10, 12, tzinfo=UTC).timestamp()
SLOT = 1_000 * int(datetime(2027, 1, 9, 2, tzinfo=UTC).timestamp())


@pytest.fixture
def clocked(tmp_path: Path) -> dict[str, str]:
    return {CLOCK_FILE_ENV: FileClock.create(tmp_path / "clock", NOON).path}


@pytest.fixture
def served(project: Project, clocked: dict[str, str]) -> Iterator[UiServer]:
    project.workflow("report", REPORT)
    project.workflow("hooked", HOOKED)
    with ui_server(project, env=clocked) as ui:
        yield ui


def record_missed_slot(project: Project) -> None:
    """A slot the host found missed after an outage (`missed: none`), as it records it."""
    state = project.root / ".wfrun" / "state"
    state.mkdir(mode=0o700, exist_ok=True)
    with SqliteStore(state / "store.sqlite3") as store:
        store.triggers.claim_many("report", "nightly", [
            ("2027-01-09T02:00:00Z", SLOT, "missed", "the host was down (missed: none)")])


def triggers(ui: UiServer) -> list[dict[str, Any]]:
    done = httpx.get(f"{ui.base}/api/triggers")
    assert done.status_code == 200, done.text
    rows: list[dict[str, Any]] = done.json()["triggers"]
    return rows


def test_api_lists_what_the_cli_lists_and_pauses_through_the_audited_path(
        project: Project, served: UiServer, clocked: dict[str, str]) -> None:
    ui = served
    # No store yet: the page reads without making one, and nothing has fired.
    rows = triggers(ui)
    assert not (project.root / ".wfrun" / "state" / "store.sqlite3").exists()
    assert [(r["name"], r["next"], r["paused"], r["last"]) for r in rows] == [
        ("hooked/push", None, False, None),
        ("report/nightly", "2027-01-11T02:00:00Z", False, None),  # 03:00 in Berlin
        ("report/often", "2027-01-10T12:00:30Z", False, None)]
    assert project.wfrun("triggers", "pause", "often", env=clocked).returncode == 0
    record_missed_slot(project)
    cli_rows = project.wfrun("triggers", "--json", env=clocked)
    assert cli_rows.returncode == 0
    assert triggers(ui) == json.loads(cli_rows.stdout)["triggers"]  # one function
    nightly = triggers(ui)[1]
    assert (nightly["missed"], nightly["overlap"], nightly["counts"]) == \
        ("none", "skip", {"missed": 1})
    assert [(f["slot"], f["outcome"], f["reason"]) for f in nightly["skipped"]] == [
        ("2027-01-09T02:00:00Z", "missed", "the host was down (missed: none)")]

    url = f"{ui.base}/api/triggers/report/often/resume"
    refused = httpx.post(url)  # no token: nothing changes, nothing is recorded
    assert refused.status_code == 401
    no_csrf = httpx.post(url, cookies={"wfrun_ui_token": token_of(ui)})
    assert no_csrf.status_code == 403
    assert triggers(ui)[2]["paused"] is True
    done = httpx.post(url, headers=bearer(ui))
    assert done.status_code == 200, done.text
    assert done.json() == {"action": "resume", "trigger": "report/often", "paused": False,
                           "changed": True}
    again = httpx.post(url, headers=bearer(ui))
    assert again.json()["changed"] is False
    assert triggers(ui)[2]["paused"] is False
    short = httpx.post(f"{ui.base}/api/triggers/nightly/pause",
                       headers=bearer(ui))  # the short name, when only one has it
    assert short.json()["trigger"] == "report/nightly"
    unknown = httpx.post(f"{ui.base}/api/triggers/report/nighty/pause", headers=bearer(ui))
    assert unknown.status_code == 400
    assert "no trigger 'report/nighty'; did you mean" in unknown.json()["error"]
    assert "\n" not in unknown.json()["error"]

    audit = project.json("audit", "--json")["actions"][::-1]
    assert [(r["action"], r["outcome"], r["origin"], r["detail"]["trigger"])
            for r in audit] == [
        ("pause", "ok", "cli", "often"),
        ("unpause", "ok", "127.0.0.1", "report/often"),
        ("unpause", "ok", "127.0.0.1", "report/often"),
        ("pause", "ok", "127.0.0.1", "nightly"),
        ("pause", "failed", "127.0.0.1", "report/nighty")]
    assert audit[1]["actor"].startswith("token:")
    assert audit[1]["workflow"] == "report"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_triggers_page_shows_policy_and_slots_and_pauses_with_confirmation(
        project: Project, served: UiServer, page: Any) -> None:
    ui = served
    record_missed_slot(project)
    with_cookie(page, ui)
    page.goto(f"{ui.base}/triggers")
    row = 'tr[data-trigger="report/nightly"]'
    page.wait_for_selector(row)
    assert page.text_content(f"{row} .schedule") == "cron '0 3 * * *' (Europe/Berlin)"
    assert page.text_content(f"{row} .policy").split() == [
        "missed", "none", "within", "24h00m", "·", "overlap", "skip"]  # the default window
    assert page.text_content(f"{row} .next").strip() == "2027-01-11 02:00:00"
    assert page.text_content(f"{row} .last").strip() == "never fired"
    assert page.text_content(f"{row} .count-missed") == "1 missed"
    assert page.text_content(f'{row} li[data-outcome="missed"]') == \
        "missed 2027-01-09 02:00:00: the host was down (missed: none)"
    assert page.is_disabled(f"{row} button[data-trigger-action=resume]")

    page.click(f"{row} button[data-trigger-action=pause]")
    page.wait_for_selector("#confirm[open]")
    page.click("#confirm-no")  # declined: nothing changes
    assert triggers(ui)[1]["paused"] is False
    page.click(f"{row} button[data-trigger-action=pause]")
    confirm(page)
    page.wait_for_selector('#trigger-result[data-outcome="ok"]')
    assert page.text_content("#trigger-result") == "trigger report/nightly paused"
    page.wait_for_selector(f'{row}[data-paused="true"]')
    assert page.text_content(f"{row} .state").strip() == "paused"
    assert page.text_content(f"{row} .next").strip() == "-"
    assert triggers(ui)[1]["paused"] is True

    # Resumed from another process: the page picks it up without a reload.
    assert project.wfrun("triggers", "resume", "report/nightly").returncode == 0
    page.wait_for_selector(f'{row}[data-paused="false"]')
    page.click(f"{row} button[data-trigger-action=pause]")
    confirm(page)
    page.wait_for_selector(f'{row}[data-paused="true"]')
    assert [(r["action"], r["origin"]) for r in project.json("audit", "--json")["actions"]] \
        == [("pause", "127.0.0.1"), ("unpause", "cli"), ("pause", "127.0.0.1")]
    assert page.js_errors == []
