"""Effects against providers that make a retry safe, one kind at a time (seed 004).

Two ways a provider keeps a retried mutation from doing harm, tested apart:

- an **idempotency token**: the request carries a key derived from the effect (not
  from the attempt), and the provider (tests/fakes/github_server.py with
  `idempotency_keys`) answers a repeat with the first answer. A comment whose
  first answer was lost (a crash between the request and its receipt, or a 500
  after the provider acted) is sent again under the same token after the
  observation found nothing to go on, and exists once. Without the token the
  same recovery creates it twice: the token, not luck, is what makes it once.
- a **conditional request** (If-Match on the ETag the pass read): when the
  resource moved, the provider answers 412 and the effect is recorded
  `rejected`. That record is final: the same effect is never sent again, and a
  retry after a lost answer carries its precondition, so it cannot overwrite a
  newer change. (GitHub's merge with the expected head `sha`, answered 409, is in
  test_controller_pull_request.py.)

Crashes are the manager's crash seam raising out of the pass (as in
test_controller_effects.py); every pass after one runs in a fresh manager on a
reopened store, so nothing carries over in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from ctlkit import REPO_NAME
from fakes.github_server import FakeGitHub

from runner.clock import FakeClock
from runner.controllers import (
    Applied,
    Condition,
    ControllerManager,
    Observation,
    ReconcileContext,
    Result,
    define_controller,
)
from runner.store import SqliteStore
from runner.store._controller_interface import Resource

PULL = f"/repos/{REPO_NAME}/pulls/7"
COMMENTS = f"/repos/{REPO_NAME}/issues/7/comments"


class Crash(BaseException):
    """The process dying at a crash point."""


class Store:
    """A store file opened again for every pass, on one fake clock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.clock = FakeClock()
        self.current: SqliteStore | None = None

    def pass_(self, controller: Any, *, crash_at: str | None = None) -> int:
        """One fresh manager (a new process) runs what is due, with an optional crash."""
        self.close()
        self.current = SqliteStore(self.path, clock=self.clock)
        crashed = [False]

        def crash(point: str) -> None:
            if point == crash_at and not crashed[0]:
                crashed[0] = True
                raise Crash(point)

        m = ControllerManager(self.current, [controller], clock=self.clock, crash=crash)
        return m.run_until_idle()

    def open(self) -> SqliteStore:
        if self.current is None:
            self.current = SqliteStore(self.path, clock=self.clock)
        return self.current

    def close(self) -> None:
        if self.current is not None:
            self.current.close()
            self.current = None


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "store.sqlite3")
    yield s
    s.close()


@pytest.fixture
def gh(github: FakeGitHub) -> FakeGitHub:
    github.add_pull(REPO_NAME, 7, "a" * 40, checks="success")
    return github


def resource(stores: Store, controller: str) -> Resource:
    r = stores.open().resources.get(controller, "pr7")
    assert r is not None
    return r


# -- idempotency tokens ------------------------------------------------------------------
def comment_controller(url: str, *, send_token: bool) -> Any:
    def reconcile(ctx: ReconcileContext, r: Resource) -> Result:
        # The token names the intended change (resource, effect key), so every attempt
        # at it, in any process, sends the same one.
        key = f"comment:{r.generation}"
        request = {"body": r.spec["body"], "idempotency_key": f"{r.uid}/{key}"}

        def observe(_request: Any) -> Observation:
            # Comments cannot be looked up by token: nothing to observe. Saying
            # "not applied" sends it again, which the token makes safe.
            return Observation("not_applied")

        def apply(req: Any) -> Applied:
            headers = {"Idempotency-Key": req["idempotency_key"]} if send_token else {}
            with httpx.Client(base_url=url, timeout=10) as http:
                res = http.post(COMMENTS, json={"body": req["body"]}, headers=headers)
            if res.status_code in (200, 201):
                return Applied("applied", str(res.json()["id"]))
            if res.status_code in (409, 412, 422):
                return Applied("rejected", error=f"{res.status_code}: {res.json()['message']}")
            return Applied("indeterminate", error=f"HTTP {res.status_code}")

        out = ctx.effects.ensure(key, "github-comment", request, observe, apply)
        if out.state == "applied":
            return ctx.settled({"comment": out.external_ref},
                               [Condition("Ready", "True", "Commented")])
        return ctx.requeue_after(10, {"effect": out.state},
                                 [Condition("Ready", "Unknown", "CommentIndeterminate")])

    return define_controller("comment", reconcile)


@pytest.mark.parametrize("lost", ["crash_after_call", "answer_500"])
@pytest.mark.parametrize(("send_token", "comments"), [(True, 1), (False, 2)],
                         ids=["token", "no_token"])
def test_a_retry_under_an_idempotency_token_after_a_lost_answer_applies_once(
        stores: Store, gh: FakeGitHub, lost: str, send_token: bool, comments: int) -> None:
    gh.idempotency_keys = True
    ctl = comment_controller(gh.url, send_token=send_token)
    ControllerManager(stores.open(), [ctl], clock=stores.clock).apply(
        "comment", "pr7", {"body": "checks are green"})
    if lost == "answer_500":
        gh.comment_fault = "apply_then_500"  # the provider acts, its answer is lost
        assert stores.pass_(ctl) == 1
        effect = stores.open().effects.get(resource(stores, "comment").uid, "comment:1")
        assert effect is not None
        assert effect.state == "indeterminate"
        gh.comment_fault = None
        stores.clock.advance(10)
    else:
        assert stores.pass_(ctl, crash_at="after_provider_call") == 1  # the pass dies
        effect = stores.open().effects.get(resource(stores, "comment").uid, "comment:1")
        assert effect is not None
        assert effect.state == "pending"
        stores.clock.advance(5)  # the failed pass's backoff
    assert len(gh.comments) == 1  # the first call did reach the provider

    assert stores.pass_(ctl) == 1  # observed (nothing to see), sent again
    posts = gh.calls("POST", "/comments")
    assert len(posts) == 2
    assert len(gh.comments) == comments
    r = resource(stores, "comment")
    effect = stores.open().effects.get(r.uid, "comment:1")
    assert effect is not None
    assert effect.state == "applied"
    assert r.status["controller_status"] == {"comment": effect.external_ref}
    if send_token:
        tokens = {p.headers.get("Idempotency-Key") for p in posts}
        assert tokens == {f"{r.uid}/comment:1"}  # one token for both attempts
        assert effect.external_ref == "1"  # the replayed first answer
        assert posts[1].body == posts[0].body
    else:
        assert effect.external_ref == "2"  # a second comment: the retry was not safe
    assert stores.pass_(ctl) == 0  # settled; nothing is sent again
    assert len(gh.calls("POST", "/comments")) == 2


def test_an_idempotency_token_reused_for_another_request_is_refused(gh: FakeGitHub) -> None:
    gh.idempotency_keys = True
    with httpx.Client(base_url=gh.url, timeout=10) as http:
        first = http.post(COMMENTS, json={"body": "a"}, headers={"Idempotency-Key": "t"})
        again = http.post(COMMENTS, json={"body": "a"}, headers={"Idempotency-Key": "t"})
        other = http.post(COMMENTS, json={"body": "b"}, headers={"Idempotency-Key": "t"})
    assert (first.status_code, again.status_code, other.status_code) == (201, 201, 422)
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert len(gh.comments) == 1


# -- conditional requests ----------------------------------------------------------------
def title_controller(url: str) -> Any:
    """Retitles the pull request, conditionally on the version the spec approved
    (`expected_etag`, as the pull-request controller's `expected_head_sha`)."""

    def reconcile(ctx: ReconcileContext, r: Resource) -> Result:
        want = r.spec["title"]
        with httpx.Client(base_url=url, timeout=10) as http:
            if http.get(PULL).json()["title"] == want:
                return ctx.settled({"title": want}, [Condition("Ready", "True", "Titled")])
            request = {"title": want, "if_match": r.spec["expected_etag"]}

            def observe(req: Any) -> Observation:
                now = http.get(PULL)
                if now.json()["title"] == req["title"]:
                    return Observation("applied", now.headers["ETag"])
                return Observation("not_applied")  # the precondition guards the retry

            def apply(req: Any) -> Applied:
                res = http.patch(PULL, json={"title": req["title"]},
                                 headers={"If-Match": req["if_match"]})
                if res.status_code == 200:
                    return Applied("applied", res.headers["ETag"])
                if res.status_code in (409, 412):
                    return Applied("rejected",
                                   error=f"{res.status_code}: {res.json()['message']}")
                return Applied("indeterminate", error=f"HTTP {res.status_code}")

            out = ctx.effects.ensure(f"title:{r.generation}", "github-title", request,
                                     observe, apply)
        if out.state == "applied":
            return ctx.settled({"title": want}, [Condition("Ready", "True", "Titled")])
        if out.state == "rejected":
            return ctx.settled({"rejected": out.error},
                               [Condition("Ready", "False", "TitleRejected")])
        return ctx.requeue_after(10, {"effect": out.state})

    return define_controller("title", reconcile)


def race_edit(gh: FakeGitHub, title: str) -> Callable[[str, str], None]:
    """Another writer edits the pull request just before the first PATCH arrives."""
    done = [False]

    def hook(method: str, path: str) -> None:
        if method == "PATCH" and not done[0]:
            done[0] = True
            gh.set_title(REPO_NAME, 7, title)

    return hook


def apply_title(stores: Store, ctl: Any, etag: str) -> None:
    ControllerManager(stores.open(), [ctl], clock=stores.clock).apply(
        "title", "pr7", {"title": "Widgets v2", "expected_etag": etag})


def test_a_conditional_request_refused_with_412_is_rejected_and_never_resent(
        stores: Store, gh: FakeGitHub) -> None:
    ctl = title_controller(gh.url)
    approved = gh.pull(REPO_NAME, 7).etag
    apply_title(stores, ctl, approved)
    gh.on_request = race_edit(gh, "Someone else's title")
    assert stores.pass_(ctl) == 1
    gh.on_request = None
    r = resource(stores, "title")
    effect = stores.open().effects.get(r.uid, "title:1")
    assert effect is not None
    assert (effect.state, effect.error) == ("rejected", "412: Precondition Failed")
    ready = next(c for c in r.status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "TitleRejected")
    assert gh.pull(REPO_NAME, 7).title == "Someone else's title"  # not overwritten
    assert [p.headers.get("If-Match") for p in gh.calls("PATCH")] == [approved]

    # Woken again, and again in a new process: the rejection is final, nothing is sent.
    for _ in range(2):
        stores.open().reconcile_queue.enqueue("title", "pr7")
        assert stores.pass_(ctl) == 1
    assert len(gh.calls("PATCH")) == 1
    assert gh.pull(REPO_NAME, 7).title == "Someone else's title"

    # A new approval (a new generation, for the version there is now) is a new effect.
    apply_title(stores, ctl, gh.pull(REPO_NAME, 7).etag)
    assert stores.pass_(ctl) == 1
    assert gh.pull(REPO_NAME, 7).title == "Widgets v2"
    assert len(gh.calls("PATCH")) == 2
    done = stores.open().effects.get(r.uid, "title:2")
    assert done is not None
    assert done.state == "applied"


def test_a_retry_after_a_lost_answer_keeps_its_precondition(
        stores: Store, gh: FakeGitHub) -> None:
    """The PATCH applied but the process died before its receipt; then another writer
    changed the title. The next pass observes (the title is not ours) and sends the
    same conditional request again: 412, rejected, and the newer title stays."""
    ctl = title_controller(gh.url)
    approved = gh.pull(REPO_NAME, 7).etag
    apply_title(stores, ctl, approved)
    assert stores.pass_(ctl, crash_at="after_provider_call") == 1
    assert gh.pull(REPO_NAME, 7).title == "Widgets v2"  # it did happen
    r = resource(stores, "title")
    effect = stores.open().effects.get(r.uid, "title:1")
    assert effect is not None
    assert effect.state == "pending"
    gh.set_title(REPO_NAME, 7, "Someone else's title")

    stores.clock.advance(5)  # the failed pass's backoff
    assert stores.pass_(ctl) == 1
    effect = stores.open().effects.get(r.uid, "title:1")
    assert effect is not None
    assert (effect.state, effect.error) == ("rejected", "412: Precondition Failed")
    assert gh.pull(REPO_NAME, 7).title == "Someone else's title"  # not clobbered
    assert [p.headers.get("If-Match") for p in gh.calls("PATCH")] == [approved, approved]
    ready = next(c for c in resource(stores, "title").status["conditions"]
                 if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "TitleRejected")
