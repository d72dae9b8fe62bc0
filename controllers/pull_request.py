"""Reconciler for the `pull-request` controller (a GitHub-compatible REST API).

Every pass re-reads the pull request before it acts. Phases: observing,
repairing, waiting, ready, merged, blocked. The merge is an effect keyed by
generation and head (`merge:<generation>:<head>`), observed before any retry, and
sent with `sha` so the server refuses it if the head moved. The repair child
workflow (`repair:<generation>:<head>`) gets facts only, never the token, and its
output never authorizes anything: the merge still needs `merge_approved`, the
expected head, green checks and a mergeable pull request.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from runner.controllers import (
    Applied,
    Condition,
    Observation,
    ReconcileContext,
    Result,
)

if TYPE_CHECKING:
    import httpx

TIMEOUT = 10.0


def _client(spec: dict[str, Any]) -> httpx.Client:
    # httpx (with the rich and pygments its own CLI module loads) is paid by a pass, not
    # by every host and `wfrun controller run` that loads this hook.
    import httpx

    token = os.environ.get("WFRUN_GITHUB_TOKEN") or os.environ.get("GITHUB_TOKEN")
    headers = {"Accept": "application/vnd.github+json", "User-Agent": "wfrun-controller"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.Client(base_url=str(spec["api_base_url"]).rstrip("/"), headers=headers,
                        timeout=TIMEOUT)


def _ready(status: str, reason: str, message: str = "") -> Condition:
    return Condition("Ready", status, reason, message)  # type: ignore[arg-type]


def reconcile(ctx: ReconcileContext, resource: Any) -> Result:
    spec = resource.spec
    repo, number = spec["repository"], spec["number"]
    gen = resource.generation
    with _client(spec) as http:
        pull = http.get(f"/repos/{repo}/pulls/{number}")
        if pull.status_code == 404:
            return ctx.settled({"phase": "blocked"},
                               [_ready("False", "NotFound", f"{repo}#{number} does not exist")])
        pull.raise_for_status()
        pr = pull.json()
        head = str(pr.get("head", {}).get("sha", ""))
        observed = {"observed_head_sha": head}
        if pr.get("merged"):
            return ctx.settled({"phase": "merged", **observed},
                               [_ready("True", "Merged", "the pull request is merged")])
        if head != spec["expected_head_sha"]:
            return ctx.settled({"phase": "blocked", **observed},
                               [_ready("False", "HeadChanged",
                                       f"head is {head[:12]}, expected "
                                       f"{spec['expected_head_sha'][:12]}; update the spec")])
        checks = http.get(f"/repos/{repo}/commits/{head}/status")
        checks.raise_for_status()
        state = checks.json().get("state", "pending")
        observed["checks"] = state
        if state == "failure":
            return _repair(ctx, spec, gen, head, observed)
        if state != "success":
            return ctx.requeue_after(30, {"phase": "waiting", **observed},
                                     [_ready("False", "ChecksPending", "checks are running")])
        if not spec.get("merge_approved"):
            return ctx.settled({"phase": "waiting", **observed},
                               [_ready("False", "ApprovalRequired",
                                       "set merge_approved: true to allow the merge")])
        if pr.get("mergeable") is False:
            return ctx.settled({"phase": "blocked", **observed},
                               [_ready("False", "NotMergeable", "the pull request has conflicts")])
        return _merge(ctx, http, repo, number, gen, head, observed)


def _repair(ctx: ReconcileContext, spec: dict[str, Any], gen: int, head: str,
            observed: dict[str, Any]) -> Result:
    workflow = spec.get("repair_workflow")
    if not workflow:
        return ctx.settled({"phase": "blocked", **observed},
                           [_ready("False", "ChecksFailed", "checks failed; no repair workflow")])
    # Facts only: no token, no headers, nothing that authorizes a mutation.
    child = ctx.workflows.ensure(f"repair:{gen}:{head}", workflow,
                                 {"repository": spec["repository"], "number": spec["number"],
                                  "head_sha": head})
    run = child.to_status()
    if child.state in ("pending", "running", "interrupted"):
        return ctx.requeue_after(5, {"phase": "repairing", **observed},
                                 [_ready("False", "Repairing", "the repair workflow is running")],
                                 workflow_run=run)
    if child.state == "failed":
        return ctx.settled({"phase": "blocked", **observed},
                           [_ready("False", "RepairFailed", child.error or "repair failed")],
                           workflow_run=run)
    return ctx.requeue_after(30, {"phase": "waiting", **observed},
                             [_ready("False", "ChecksPending",
                                     "repair finished; waiting for checks on a new head")],
                             workflow_run=run)


def _merge(ctx: ReconcileContext, http: httpx.Client, repo: str, number: int, gen: int,
           head: str, observed: dict[str, Any]) -> Result:
    def observe(_request: Any) -> Observation:
        again = http.get(f"/repos/{repo}/pulls/{number}")
        if again.status_code != 200:
            return Observation("indeterminate")
        body = again.json()
        if body.get("merged"):
            return Observation("applied", str(body.get("merge_commit_sha") or ""))
        return Observation("not_applied")

    def apply(request: Any) -> Applied:
        res = http.put(f"/repos/{repo}/pulls/{number}/merge", json={"sha": request["sha"]})
        if res.status_code == 200:
            return Applied("applied", str(res.json().get("sha", "")))
        if res.status_code in (405, 409, 422):
            message = str(res.json().get("message", res.reason_phrase))[:200]
            return Applied("rejected", error=f"{res.status_code}: {message}")
        return Applied("indeterminate", error=f"HTTP {res.status_code}")

    outcome = ctx.effects.ensure(f"merge:{gen}:{head}", "github-merge", {"sha": head},
                                 observe, apply)
    if outcome.state == "applied":
        return ctx.settled({"phase": "merged", "merge_sha": outcome.external_ref, **observed},
                           [_ready("True", "Merged", "merged by the controller")])
    if outcome.state == "rejected":
        return ctx.settled({"phase": "blocked", **observed},
                           [_ready("False", "MergeRejected", outcome.error or "merge refused")])
    return ctx.requeue_after(10, {"phase": "ready", **observed},
                             [_ready("Unknown", "MergeIndeterminate",
                                     "the merge result is unknown; observing before any retry")])
