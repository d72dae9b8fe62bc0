"""A node's `cache:` (issue 39): reuse an earlier ok result of the same node.

The key is the fingerprint of the workflow's name, the node's id and digest (its
normalized definition: a changed node never hits an old entry) and what the node
will act on: the `key` template rendered, or by default its rendered prompt (agent),
argv, stdin, cwd and env (shell action), or, for other kinds, the input and outputs
its templates can read. A hit is recorded in the trace (`node_started` with
`cached`, `node_finished` with `cached_from`: the run that produced it) and nothing
runs; only an ok result is kept, under the node's `ttl`.

The entries live in the store (launch/_stepcache.py adapts it): the engine sees only
`StepCache`, and a store that fails is a miss (or a result not kept), never a
failed node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from runner._canonical import fingerprint
from runner.compiler import ActionSpec, AgentSpec, Node
from runner.compiler._templates import TemplateError, render_text

from ._nodecontext import NodeResult


@dataclass(frozen=True)
class CachedResult:
    output: Any
    run_id: str  # the run that produced it
    created_at: int  # ms (store clock)


class StepCache(Protocol):
    def get(self, key: str) -> CachedResult | None:
        """The unexpired entry under `key`; None on a miss or an unreachable store."""
        ...

    def put(self, key: str, *, workflow: str, node_id: str, run_id: str, output: Any,
            ttl: float) -> None:
        """Keep an ok output for `ttl` seconds (best effort)."""
        ...


def cache_key(workflow: str, node: Node, ctx: dict[str, Any]) -> str:
    """The key of `node`'s result in context `ctx` (raises TemplateError)."""
    assert node.cache is not None
    basis: Any
    if node.cache.key is not None:
        basis = {"key": render_text(node.cache.key, ctx)}
    else:
        basis = _rendered(node, ctx)
    return fingerprint({"workflow": workflow, "node": node.id,
                        "digest": fingerprint(node.to_json()), "basis": basis})


def _rendered(node: Node, ctx: dict[str, Any]) -> Any:
    spec = node.spec
    if isinstance(spec, AgentSpec):
        return {"prompt": render_text(spec.prompt, ctx)}
    if isinstance(spec, ActionSpec) and spec.call is None:
        shell = render_text(spec.shell, ctx) if isinstance(spec.shell, str) \
            else [render_text(arg, ctx) for arg in spec.shell or ()]
        return {"shell": shell,
                "stdin": render_text(spec.stdin, ctx) if spec.stdin is not None else None,
                "cwd": render_text(spec.cwd, ctx) if spec.cwd else None,
                "env": {k: render_text(v, ctx) for k, v in spec.env.items()}}
    # A compute expression or a hook: what its templates and code can read.
    return {"input": ctx.get("input"), "outputs": dict(ctx.get("outputs") or {})}


# -- the run loop's side (RunDriver._run_node) -------------------------------------------

def lookup(cache: StepCache, workflow: str, node: Node, ctx: dict[str, Any],
           reads: bool) -> tuple[str | None, NodeResult | None]:
    """The node's cache key and, on a hit, its result (recorded as cached). `reads`
    False: --no-cache (the key only: the fresh result is kept under it)."""
    try:
        key = cache_key(workflow, node, ctx)
    except TemplateError as exc:
        return None, NodeResult("failed", error={"code": "template_error",
                                                 "message": f"cache key: {exc}"[:2000]})
    except ValueError:
        return None, None  # not JSON to key on: it runs, uncached
    if not reads:
        return key, None
    hit = cache.get(key)
    if hit is None:
        return key, None
    return key, NodeResult("ok", hit.output, extra={"cached_from": {
        "run_id": hit.run_id, "key": key, "created_at": hit.created_at}})


def keep(cache: StepCache, key: str, workflow: str, node: Node, run_id: str,
         output: Any) -> None:
    """Keep a node's ok `output` (masked as its trace holds it) under `key`."""
    assert node.cache is not None
    cache.put(key, workflow=workflow, node_id=node.id, run_id=run_id, output=output,
              ttl=node.cache.ttl)
