"""Operating runs (issue 39), written once over the seam: rerun links, pause and
unpause of parked launches, and the step cache.

- `workflow_reruns`: a rerun's link to the run it reran. The row is written before
  the rerun's launch is queued, so a reader joins it with its launch row: a rerun
  whose launch never committed (its process died in between) is not shown.
- Pausing a parked launch sets its `park_mode` to `paused` (no host claims it);
  unpausing sets `auto` and announces it, as a host shutdown's park is. A running
  launch is paused by its runner (`launch/_pausing.py`: a run event the lease keeper
  reads, the same road a cross-process cancel takes), which parks it `paused`.
- `step_cache`: one ok output per cache key, with the run that produced it and
  when it expires (store clock). A put replaces the key's row; a read ignores an
  expired row and `clear` removes rows.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runner.store._connector import Connector, Row, in_params, named
from runner.store._records import (
    CACHE_MAX_BYTES,
    LaunchRecord,
    LostRace,
    canonical_json,
    check_id,
)
from runner.store.domain._launch_queries import LAUNCH_CHANNEL, RunEvents, launch_from_row

SQL: Mapping[str, str] = {
    "link": "INSERT INTO workflow_reruns (run_id, rerun_of, from_node, forced,"
    " changed_nodes_json, created_at) VALUES (:run_id, :rerun_of, :from_node, :forced,"
    " :changed, :now)",
    "unlink": "DELETE FROM workflow_reruns WHERE run_id = :run_id AND NOT EXISTS ("
    " SELECT 1 FROM workflow_run_queue q WHERE q.run_id = :run_id)",
    "reruns_of": "SELECT r.* FROM workflow_reruns r JOIN workflow_run_queue q"
    " ON q.run_id = r.run_id WHERE r.rerun_of = :run_id ORDER BY r.created_at, r.run_id",
    "rerun": "SELECT r.* FROM workflow_reruns r JOIN workflow_run_queue q"
    " ON q.run_id = r.run_id WHERE r.run_id = :run_id",
    "load": "SELECT * FROM workflow_run_queue WHERE run_id = :run_id",
    "set_park_mode": "UPDATE workflow_run_queue SET park_mode = :mode, updated_at = :now"
    " WHERE run_id = :run_id AND status = 'parked' AND park_mode = :was",
    "cache_get": "SELECT * FROM step_cache WHERE cache_key = :key AND expires_at > {now}",
    "cache_put": "INSERT INTO step_cache (cache_key, workflow, node_id, run_id, output_json,"
    " created_at, expires_at) VALUES (:key, :workflow, :node, :run_id, :output, :now,"
    " :expires) ON CONFLICT (cache_key) DO UPDATE SET workflow = :workflow, node_id = :node,"
    " run_id = :run_id, output_json = :output, created_at = :now, expires_at = :expires",
    "cache_list": "SELECT cache_key, workflow, node_id, run_id, created_at, expires_at"
    " FROM step_cache WHERE {where} ORDER BY workflow, node_id, created_at LIMIT :limit",
    "cache_clear": "DELETE FROM step_cache WHERE {where}",
}


@dataclass(frozen=True, slots=True)
class RerunLink:
    """One rerun: the run `run_id` reran `rerun_of` from node `from_node`."""

    run_id: str
    rerun_of: str
    from_node: str
    forced: bool
    changed_nodes: tuple[str, ...]
    created_at: int

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "rerun_of": self.rerun_of, "from_node": self.from_node,
                "forced": self.forced, "changed_nodes": list(self.changed_nodes),
                "created_at": self.created_at}


def _link(row: Row) -> RerunLink:
    return RerunLink(run_id=row["run_id"], rerun_of=row["rerun_of"],
                     from_node=row["from_node"], forced=bool(row["forced"]),
                     changed_nodes=tuple(json.loads(row["changed_nodes_json"])),
                     created_at=row["created_at"])


class Reruns:
    """`workflow_reruns` over a connector."""

    def __init__(self, connector: Connector, overrides: Mapping[str, str] | None = None) -> None:
        self._connector = connector
        self._sql = named(SQL, overrides)

    def link(self, run_id: str, rerun_of: str, from_node: str, *, forced: bool,
             changed_nodes: Sequence[str]) -> None:
        """Record that `run_id` (not queued yet) reruns `rerun_of`."""
        check_id(run_id, "run_id")
        check_id(rerun_of, "rerun_of")
        check_id(from_node, "from_node")
        if run_id == rerun_of:
            raise ValueError(f"run {run_id} cannot rerun itself")
        changed = canonical_json(list(changed_nodes), what="changed nodes")
        with self._connector.write() as tx:
            tx.run(self._sql["link"], {"run_id": run_id, "rerun_of": rerun_of,
                                       "from_node": from_node, "forced": int(forced),
                                       "changed": changed, "now": tx.now_ms()})

    def unlink(self, run_id: str) -> None:
        """Forget the link of a rerun whose launch was refused (no launch row)."""
        with self._connector.write() as tx:
            tx.run(self._sql["unlink"], {"run_id": run_id})

    def reruns_of(self, run_id: str) -> list[RerunLink]:
        """The reruns of `run_id`, oldest first (`rerun_by`)."""
        with self._connector.read() as tx:
            return [_link(row) for row in tx.all(self._sql["reruns_of"], {"run_id": run_id})]

    def rerun(self, run_id: str) -> RerunLink | None:
        """What `run_id` reran, if it is a rerun (`rerun_of`)."""
        with self._connector.read() as tx:
            row = tx.one(self._sql["rerun"], {"run_id": run_id})
        return _link(row) if row is not None else None


class Pauses:
    """The park mode changes of `wfrun pause` and `wfrun unpause` on parked launches,
    each with a `launch.paused` / `launch.unpaused` run event in its transaction."""

    def __init__(self, connector: Connector, run_events: RunEvents,
                 overrides: Mapping[str, str] | None = None) -> None:
        self._connector = connector
        self._events = run_events
        self._sql = named(SQL, overrides)

    def pause_parked(self, run_id: str, *, runner_id: str | None = None
                     ) -> LaunchRecord | LostRace:
        """A parked launch (auto or explicit) becomes `paused`: no host resumes it."""
        return self._switch(run_id, ("auto", "explicit"), "paused", "launch.paused", runner_id)

    def unpause(self, run_id: str, *, runner_id: str | None = None) -> LaunchRecord | LostRace:
        """A paused launch becomes claimable again (`auto`): the next host resumes it."""
        return self._switch(run_id, ("paused",), "auto", "launch.unpaused", runner_id)

    def _switch(self, run_id: str, sources: tuple[str, ...], mode: str, event: str,
                runner_id: str | None) -> LaunchRecord | LostRace:
        with self._events.writing() as (tx, log):
            row = tx.one(self._sql["load"] + tx.dialect.lock, {"run_id": run_id})
            if row is None:
                return LostRace(run_id, "not_found")
            if row["status"] != "parked" or row["park_mode"] not in sources:
                return LostRace(run_id, "wrong_status", row["status"])
            changed = tx.run(self._sql["set_park_mode"], {
                "mode": mode, "was": row["park_mode"], "run_id": run_id, "now": tx.now_ms()})
            assert changed == 1, "row changed under its lock"
            log.add(run_id, event, {"from": row["park_mode"], "to": mode},
                    workflow_ref=row["workflow_ref"], runner_id=runner_id)
            if mode == "auto" and row["origin_session_id"] is None and tx.dialect.notices:
                tx.notify(LAUNCH_CHANNEL, run_id)  # a waiting host takes it now
            updated = tx.one(self._sql["load"], {"run_id": run_id})
        assert updated is not None
        return launch_from_row(updated)


@dataclass(frozen=True, slots=True)
class CacheEntry:
    cache_key: str
    workflow: str
    node_id: str
    run_id: str
    created_at: int
    expires_at: int
    output: Any = None

    def to_json(self) -> dict[str, Any]:
        return {"key": self.cache_key, "workflow": self.workflow, "node": self.node_id,
                "run_id": self.run_id, "created_at": self.created_at,
                "expires_at": self.expires_at}


def _entry(row: Row, output: bool = False) -> CacheEntry:
    return CacheEntry(cache_key=row["cache_key"], workflow=row["workflow"],
                      node_id=row["node_id"], run_id=row["run_id"],
                      created_at=row["created_at"], expires_at=row["expires_at"],
                      output=json.loads(row["output_json"]) if output else None)


class StepCache:
    """`step_cache` over a connector; times are the store's clock (ms)."""

    def __init__(self, connector: Connector, overrides: Mapping[str, str] | None = None) -> None:
        self._connector = connector
        self._sql = named(SQL, overrides)

    def get(self, key: str) -> CacheEntry | None:
        """The unexpired entry under `key`, with its output."""
        with self._connector.read() as tx:
            now, params = tx.clock_sql()
            row = tx.one(self._sql["cache_get"].format(now=now), {"key": key, **params})
        return _entry(row, output=True) if row is not None else None

    def put(self, key: str, *, workflow: str, node_id: str, run_id: str, output: Any,
            ttl_ms: int) -> bool:
        """Keep `output` under `key` for `ttl_ms`; False (nothing kept) when the output
        is over CACHE_MAX_BYTES as JSON."""
        check_id(key, "cache_key")
        if ttl_ms <= 0:
            raise ValueError(f"a cache ttl must be positive, got {ttl_ms!r}")
        try:
            text = canonical_json(output, what="cached output", max_bytes=CACHE_MAX_BYTES)
        except ValueError:
            return False
        with self._connector.write() as tx:
            now = tx.now_ms()
            tx.run(self._sql["cache_put"], {"key": key, "workflow": workflow, "node": node_id,
                                            "run_id": run_id, "output": text, "now": now,
                                            "expires": now + ttl_ms})
        return True

    def entries(self, *, workflow: str | None = None, node_id: str | None = None,
                limit: int = 1000) -> list[CacheEntry]:
        where, params = _where(workflow, node_id)
        with self._connector.read() as tx:
            rows = tx.all(self._sql["cache_list"].format(where=where),
                          {**params, "limit": limit})
        return [_entry(row) for row in rows]

    def clear(self, *, workflow: str | None = None, node_id: str | None = None,
              keys: Sequence[str] = (), expired: bool = False) -> int:
        """Remove entries (of a workflow, of one of its nodes, by key, or only the
        expired ones); the count."""
        where, params = _where(workflow, node_id)
        if expired:
            where += " AND expires_at <= :now"
            params["now"] = self._connector.now_ms()
        if keys:
            marks, key_params = in_params("k", keys)
            where += f" AND cache_key IN {marks}"
            params.update(key_params)
        with self._connector.write() as tx:
            return tx.run(self._sql["cache_clear"].format(where=where), params)


def _where(workflow: str | None, node_id: str | None) -> tuple[str, dict[str, object]]:
    terms: list[str] = ["1 = 1"]
    params: dict[str, object] = {}
    if workflow is not None:
        terms.append("workflow = :workflow")
        params["workflow"] = workflow
    if node_id is not None:
        terms.append("node_id = :node")
        params["node"] = node_id
    return " AND ".join(terms), params
