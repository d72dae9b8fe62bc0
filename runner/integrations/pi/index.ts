/**
 * wfrun for Pi (>= 1.6): the `workflow` tool, `/workflow` and `/controller`, and a
 * status view of this session's launches.
 *
 * A thin adapter. wfrun owns launches, activation and follow-ups; this file only
 * spawns `wfrun bridge` (JSON-RPC 2.0 lines on stdio, docs/hosts.md) in the
 * session's project and maps Pi onto it:
 *   session_start    -> initialize (the tool schema comes back), session/start
 *   agent_start      -> turn/started
 *   agent_settled    -> turn/settled (Pi will not continue on its own: no retry,
 *                       compaction or queued message is left; agent_end is not that)
 *   session_shutdown -> session/shutdown, then the bridge and the controllers stop
 *   host/appendMessage  <- pi.sendMessage(triggerTurn, deliverAs); answered once the
 *                          message is in the session file, so wfrun never records a
 *                          delivery Pi could still lose
 *   host/readEntries    <- the session's entries (wfrun scans them for ids it sent)
 * The project's controllers run in a `wfrun controller run` child from session
 * start to shutdown. Rendering reads durable state and is never the source of truth.
 *
 * No npm imports at run time: only node built-ins and the package Pi maps to itself.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const MIN_PI: [number, number] = [1, 6];
const PROTOCOL_VERSION = 1;
const APPEND_PERSIST_TIMEOUT_MS = 30_000;
const STOP_GRACE_MS = 10_000;
const STATUS_KEY = "wfrun";

type Json = any; // eslint-disable-line @typescript-eslint/no-explicit-any
type Ctx = any; // ExtensionContext (kept untyped: the file must load without Pi's types)
type Pi = any; // ExtensionAPI

// -- where wfrun is ---------------------------------------------------------------------
function here(): string {
  try {
    return dirname(fileURLToPath(import.meta.url));
  } catch {
    return typeof __dirname === "string" ? __dirname : process.cwd();
  }
}

/** The argv that runs wfrun: wfrun.json beside this file (written by `wfrun integrate
 * pi`), else $WFRUN_COMMAND (a JSON array or one path), else `wfrun` on PATH. */
export function wfrunCommand(env: NodeJS.ProcessEnv = process.env): string[] {
  const config = join(here(), "wfrun.json");
  if (existsSync(config)) {
    const doc = JSON.parse(readFileSync(config, "utf8"));
    if (Array.isArray(doc.command) && doc.command.length > 0) return doc.command.map(String);
  }
  const fromEnv = env.WFRUN_COMMAND?.trim();
  if (fromEnv) return fromEnv.startsWith("[") ? JSON.parse(fromEnv).map(String) : [fromEnv];
  return ["wfrun"];
}

// -- the version gate -----------------------------------------------------------------
function piVersion(pkg: Json): string | undefined {
  const v = pkg?.VERSION;
  return typeof v === "string" ? v : undefined;
}

export function tooOld(version: string | undefined): string | undefined {
  const m = /^(\d+)\.(\d+)/.exec(version ?? "");
  if (m && (Number(m[1]) > MIN_PI[0] || (Number(m[1]) === MIN_PI[0] && Number(m[2]) >= MIN_PI[1]))) {
    return undefined;
  }
  return (
    `wfrun: Pi ${version ?? "(unknown version)"} is too old; wfrun needs Pi >= ${MIN_PI.join(".")} ` +
    "(its agent_settled event: older agent_end fires before auto-retry, so a workflow could start " +
    "inside the turn that queued it). Update Pi: npm install -g @earendil-works/pi-coding-agent"
  );
}

// -- the bridge: JSON-RPC 2.0, one message per LF-terminated line ------------------------
type Handler = (method: string, params: Json) => Promise<Json>;

class BridgeError extends Error {}

class Bridge {
  private child: ChildProcess;
  private nextId = 1;
  private pending = new Map<number, { resolve: (v: Json) => void; reject: (e: Error) => void }>();
  private buffer = Buffer.alloc(0);
  private stderrTail: string[] = [];
  exited: string | undefined;
  readonly done: Promise<void>;

  constructor(argv: string[], cwd: string, private onRequest: Handler,
              private onNotify: (method: string, params: Json) => void) {
    this.child = spawn(argv[0], [...argv.slice(1), "bridge"], {
      cwd, env: process.env, stdio: ["pipe", "pipe", "pipe"],
    });
    this.done = new Promise((resolve) => {
      const finish = (why: string) => {
        if (this.exited === undefined) {
          this.exited = why;
          const detail = this.stderrTail.filter((l) => l.trim()).slice(-1)[0];
          const error = new BridgeError(`wfrun bridge ${why}${detail ? `: ${detail}` : ""}`);
          for (const p of this.pending.values()) p.reject(error);
          this.pending.clear();
        }
        resolve();
      };
      this.child.on("error", (e) => finish(`could not start (${argv[0]}: ${e.message})`));
      this.child.on("exit", (code, signal) => finish(signal ? `was killed (${signal})` : `exited (${code})`));
    });
    this.child.stdout!.on("data", (chunk: Buffer) => this.read(chunk));
    this.child.stderr!.on("data", (chunk: Buffer) => {
      process.stderr.write(chunk);
      this.stderrTail = [...this.stderrTail, ...chunk.toString("utf8").split("\n")].slice(-20);
    });
    this.child.stdin!.on("error", () => {}); // a dead bridge is reported by `exit`
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  /** Split on LF only: readline would also split on U+2028, valid inside JSON strings. */
  private read(chunk: Buffer): void {
    this.buffer = Buffer.concat([this.buffer, chunk]);
    let at: number;
    while ((at = this.buffer.indexOf(10)) >= 0) {
      const line = this.buffer.subarray(0, at).toString("utf8").replace(/\r$/, "");
      this.buffer = this.buffer.subarray(at + 1);
      if (line.trim()) this.dispatch(line);
    }
  }

  private dispatch(line: string): void {
    let doc: Json;
    try {
      doc = JSON.parse(line);
    } catch {
      process.stderr.write(`wfrun extension: ignored a non-JSON line from the bridge\n`);
      return;
    }
    if (typeof doc.method === "string") {
      if (doc.id === undefined) {
        this.onNotify(doc.method, doc.params ?? {});
        return;
      }
      this.onRequest(doc.method, doc.params ?? {}).then(
        (result) => this.write({ id: doc.id, result: result ?? {} }),
        (e: Error) => this.write({ id: doc.id, error: { code: -32603, message: String(e?.message ?? e) } }),
      );
      return;
    }
    const slot = this.pending.get(doc.id);
    if (!slot) return;
    this.pending.delete(doc.id);
    if (doc.error) slot.reject(new BridgeError(String(doc.error.message ?? "bridge error")));
    else slot.resolve(doc.result);
  }

  private write(message: Json): void {
    if (this.exited !== undefined) return;
    this.child.stdin!.write(JSON.stringify({ jsonrpc: "2.0", ...message }) + "\n");
  }

  request(method: string, params: Json = {}): Promise<Json> {
    if (this.exited !== undefined) {
      return Promise.reject(new BridgeError(`wfrun bridge ${this.exited}`));
    }
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.write({ id, method, params });
    });
  }

  /** Close stdin (the bridge shuts the session down and exits); SIGKILL after a grace. */
  async close(): Promise<void> {
    if (this.exited === undefined) {
      this.child.stdin!.end();
      const timer = setTimeout(() => this.child.kill("SIGKILL"), STOP_GRACE_MS);
      await this.done;
      clearTimeout(timer);
    }
  }
}

// -- the controller manager child --------------------------------------------------------
// `wfrun controller run` does not read stdin, so a small sh keeps the pipe from Pi
// and stops the manager (SIGTERM: graceful, claims released, rows kept) when the
// pipe closes: at shutdown, or when Pi dies without one. No manager outlives Pi.
const WATCHDOG = '"$@" controller run </dev/null & pid=$!; cat >/dev/null; ' +
  'kill -TERM "$pid" 2>/dev/null; wait "$pid"';

class Controllers {
  private child: ChildProcess | undefined;
  private exited: Promise<void> | undefined;

  start(argv: string[], cwd: string): void {
    if (this.child) return;
    const child = spawn("/bin/sh", ["-c", WATCHDOG, "wfrun-controllers", ...argv], {
      cwd, env: process.env, stdio: ["pipe", "ignore", "pipe"], detached: true,
    });
    child.stderr!.on("data", (chunk: Buffer) => process.stderr.write(chunk));
    child.stdin!.on("error", () => {});
    this.exited = new Promise((resolve) => {
      child.on("exit", () => resolve());
      child.on("error", () => resolve());
    });
    this.child = child;
  }

  /** Idempotent: close the pipe, wait; SIGKILL the group only after a grace period. */
  async stop(): Promise<void> {
    const child = this.child;
    if (!child || !this.exited) return;
    child.stdin!.end();
    const timer = setTimeout(() => {
      try {
        if (child.pid) process.kill(-child.pid, "SIGKILL");
      } catch {
        // already gone
      }
    }, STOP_GRACE_MS);
    await this.exited;
    clearTimeout(timer);
  }
}

// -- mapping Pi's session entries to the bridge's ---------------------------------------
function entryDoc(e: Json): Json {
  const base: Json = { id: e.id, type: e.type, parentId: e.parentId ?? null };
  if (e.type === "message") {
    return { ...base, role: e.message?.role, content: e.message?.content ?? null };
  }
  if (e.type === "custom_message") {
    return { ...base, customType: e.customType, content: e.content ?? null,
             details: isObject(e.details) ? e.details : null };
  }
  if (e.type === "custom") {
    return { ...base, customType: e.customType, details: isObject(e.data) ? e.data : null };
  }
  return base;
}

function isObject(v: Json): boolean {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

const DELIVER_AS: Record<string, string> = { steer: "steer", follow_up: "followUp", next_turn: "nextTurn" };

function sameDetails(a: Json, b: Json): boolean {
  return JSON.stringify(a ?? null) === JSON.stringify(b ?? null);
}

// -- the extension ---------------------------------------------------------------------
export default async function wfrun(pi: Pi): Promise<void> {
  let version: string | undefined;
  try {
    // Pi maps this (legacy) name to itself, so it resolves in every Pi release.
    version = piVersion(await import("@mariozechner/pi-coding-agent"));
  } catch {
    version = undefined;
  }
  const refusal = tooOld(version);
  if (refusal) {
    process.stderr.write(refusal + "\n");
    pi.on("session_start", async (_e: Json, ctx: Ctx) => ctx.ui.notify(refusal, "error"));
    pi.registerCommand("workflow", {
      description: "wfrun (disabled: this Pi is too old)",
      handler: async (_args: string, ctx: Ctx) => ctx.ui.notify(refusal, "error"),
    });
    return;
  }

  let bridge: Bridge | undefined;
  let ctxNow: Ctx | undefined;
  let settling = false; // inside an agent_settled handler: Pi defers triggered runs
  let toolRegistered = false;
  let active = false; // between session_start and session_shutdown
  const controllers = new Controllers();
  const waitingAppends: { customType: string; details: Json; done: () => void }[] = [];
  const argv = wfrunCommand();

  const fail = (what: string) => (e: Error) => ctxNow?.ui.notify(`wfrun: ${what}: ${e.message}`, "error");

  // Every append wfrun asks for ends up in Pi's session file before we answer.
  pi.on("message_end", async (event: Json) => {
    const m = event.message;
    if (m?.role !== "custom") return;
    for (let i = 0; i < waitingAppends.length; i++) {
      const w = waitingAppends[i];
      if (w.customType === m.customType && sameDetails(w.details, m.details)) {
        waitingAppends.splice(i, 1);
        w.done();
        return;
      }
    }
  });

  function findEntryId(customType: string, details: Json): string | null {
    const entries = ctxNow?.sessionManager.getEntries() ?? [];
    for (let i = entries.length - 1; i >= 0; i--) {
      const e = entries[i];
      if (e.type === "custom_message" && e.customType === customType && sameDetails(e.details, details)) {
        return e.id;
      }
    }
    return null;
  }

  async function appendMessage(p: Json): Promise<Json> {
    const deliverAs = DELIVER_AS[p.deliverAs ?? "follow_up"] ?? "followUp";
    const message = { customType: String(p.customType), content: String(p.content ?? ""),
                      display: true, details: p.details ?? {} };
    const persisted = new Promise<void>((resolve) => {
      waitingAppends.push({ customType: message.customType, details: message.details, done: resolve });
    });
    // Not awaited: with triggerTurn the promise lasts the whole turn it starts.
    Promise.resolve(pi.sendMessage(message, { triggerTurn: Boolean(p.triggerTurn), deliverAs }))
      .catch(fail("could not send a message"));
    // nextTurn messages wait for the user's next prompt; inside agent_settled Pi
    // starts the turn only after the handler returns, so waiting would deadlock.
    if (deliverAs !== "nextTurn" && !settling) {
      let timer: NodeJS.Timeout | undefined;
      const timedOut = new Promise<void>((_, reject) => {
        timer = setTimeout(() => reject(new Error("the message was not written to the session in time")),
                           APPEND_PERSIST_TIMEOUT_MS);
      });
      try {
        await Promise.race([persisted, timedOut]);
      } finally {
        clearTimeout(timer);
      }
    }
    void render();
    return { entryId: findEntryId(message.customType, message.details) };
  }

  async function onHostRequest(method: string, params: Json): Promise<Json> {
    if (method === "host/appendMessage") return appendMessage(params);
    if (method === "host/readEntries") {
      return { entries: (ctxNow?.sessionManager.getEntries() ?? []).map(entryDoc) };
    }
    throw new Error(`this extension does not implement ${method}`);
  }

  function onHostNotify(method: string, params: Json): void {
    if (method === "host/abortTurn") ctxNow?.abort();
    else if (method === "host/notify") {
      const level = params.level === "error" || params.level === "warning" ? params.level : "info";
      ctxNow?.ui.notify(String(params.text ?? ""), level);
      void render();
    }
  }

  /** This session's launches, from the store, in Pi's status line and a widget. */
  async function render(): Promise<void> {
    const b = bridge;
    if (!b || b.exited !== undefined || !ctxNow?.hasUI) return;
    let launches: Json[];
    try {
      launches = (await b.request("session/launches", {})).launches ?? [];
    } catch {
      return; // an older bridge without the view, or one that is gone: no view
    }
    const shown = launches.filter((l: Json) =>
      ["queued", "starting", "running", "failed", "cancelled"].includes(l.status));
    if (shown.length === 0) {
      ctxNow.ui.setStatus(STATUS_KEY, undefined);
      ctxNow.ui.setWidget(STATUS_KEY, undefined);
      return;
    }
    const counts = new Map<string, number>();
    for (const l of shown) counts.set(l.status, (counts.get(l.status) ?? 0) + 1);
    ctxNow.ui.setStatus(STATUS_KEY, "wfrun: " + [...counts].map(([s, n]) => `${n} ${s}`).join(", "));
    ctxNow.ui.setWidget(STATUS_KEY, shown.slice(0, 8).map((l: Json) =>
      `${l.status.padEnd(9)} ${l.runId}${l.error?.code ? `  ${l.error.code}` : ""}`));
  }

  async function ensureBridge(ctx: Ctx): Promise<Bridge> {
    if (bridge && bridge.exited === undefined) return bridge;
    const b = new Bridge(argv, ctx.cwd, onHostRequest, onHostNotify);
    bridge = b;
    const init = await b.request("initialize", {
      protocolVersion: PROTOCOL_VERSION, sessionId: ctx.sessionManager.getSessionId(),
      idle: ctx.isIdle(), client: { name: "pi", version },
    });
    if (!toolRegistered) {
      for (const tool of init.tools ?? []) registerTool(tool);
      toolRegistered = true;
    }
    return b;
  }

  function registerTool(tool: Json): void {
    pi.registerTool({
      name: tool.name,
      label: "Workflow",
      description: tool.description,
      parameters: tool.parameters, // the bridge serves WORKFLOW_TOOL: one source of truth
      async execute(toolCallId: string, params: Json, _signal: Json, _onUpdate: Json, ctx: Ctx) {
        ctxNow = ctx ?? ctxNow;
        const b = await liveBridge(ctxNow);
        if (!b) throw new Error(`wfrun is not available in this session (${bridge?.exited ?? "no bridge"})`);
        const reply = await b.request("tool/call", { name: tool.name, callId: toolCallId, arguments: params });
        void render();
        return { content: [{ type: "text", text: String(reply.content ?? "") }],
                 details: reply.details ?? {}, isError: Boolean(reply.isError) };
      },
    });
  }

  /** The bridge, started again if it died (a crash must not cost the session its
   * workflows): the new one recovers like a resumed session. */
  async function liveBridge(ctx: Ctx): Promise<Bridge | undefined> {
    if (bridge && bridge.exited === undefined) return bridge;
    if (!active) return undefined;
    const dead = bridge?.exited;
    try {
      const b = await ensureBridge(ctx);
      if (dead !== undefined) {
        ctx.ui.notify(`wfrun: the bridge ${dead}; started a new one`, "warning");
        b.request("session/start", { reason: "resume", idle: ctx.isIdle() }).catch(fail("session resume"));
      }
      return b;
    } catch (e) {
      ctx.ui.notify(`wfrun: ${(e as Error).message}`, "error");
      return undefined;
    }
  }

  pi.on("session_start", async (event: Json, ctx: Ctx) => {
    ctxNow = ctx;
    active = true;
    let b: Bridge;
    try {
      b = await ensureBridge(ctx);
    } catch (e) {
      // Not a wfrun project, or a broken store: say so once, then stay out of the way.
      active = false;
      ctx.ui.notify(`wfrun: ${(e as Error).message}`, "error");
      return;
    }
    controllers.start(argv, ctx.cwd);
    // Recovery of this session's launches runs at this boundary when Pi is idle.
    b.request("session/start", { reason: event.reason ?? "startup", idle: ctx.isIdle() })
      .then(() => render(), fail("session start"));
  });

  pi.on("agent_start", async (_event: Json, ctx: Ctx) => {
    ctxNow = ctx;
    const b = await liveBridge(ctx);
    b?.request("turn/started", {}).catch(fail("turn start"));
  });

  pi.on("agent_settled", async (event: Json, ctx: Ctx) => {
    ctxNow = ctx;
    const b = await liveBridge(ctx);
    if (!b) return;
    const settled = b.request("turn/settled", { aborted: Boolean(event.aborted) })
      .then(() => render(), fail("turn settled"));
    // A one-shot Pi exits once settled handlers return: keep it until wfrun's reply
    // (the bridge answers when a just-activated run is quiet). A long-lived Pi need
    // not wait, and not waiting lets appends be acknowledged only once persisted.
    if (ctx.mode === "print" || ctx.mode === "json") {
      settling = true;
      try {
        await settled;
      } finally {
        settling = false;
      }
    }
  });

  pi.on("session_shutdown", async (event: Json) => {
    active = false;
    const b = bridge;
    bridge = undefined;
    if (b) {
      await b.request("session/shutdown", { reason: event.reason ?? "quit" }).catch(() => undefined);
      await b.close();
    }
    await controllers.stop();
  });

  pi.registerCommand("workflow", {
    description: "wfrun: /workflow list | status [RUN] | cancel [RUN] | pause | resume | start NAME [JSON]",
    handler: async (args: string, ctx: Ctx) => {
      ctxNow = ctx;
      const [action = "status", ...rest] = (args ?? "").trim().split(/\s+/).filter(Boolean);
      const call: Json = { action };
      if (["status", "cancel"].includes(action) && rest[0]) call.runId = rest[0];
      if (action === "list" && rest[0]) call.offset = Number(rest[0]);
      if (action === "start") {
        call.workflow = rest[0];
        const text = rest.slice(1).join(" ");
        if (text) {
          try {
            call.input = JSON.parse(text);
          } catch {
            ctx.ui.notify("wfrun: /workflow start NAME [JSON]: the input is not valid JSON", "error");
            return;
          }
        }
      }
      try {
        const b = await ensureBridge(ctx);
        const reply = await b.request("tool/call", { name: "workflow", callId: `command-${Date.now()}`, arguments: call });
        ctx.ui.notify(String(reply.content), reply.isError ? "error" : "info");
        // Typed while idle, a start has no turn to settle after: this is the boundary.
        if (action === "start" && !reply.isError && ctx.isIdle()) {
          await b.request("turn/settled", { aborted: false });
        }
      } catch (e) {
        ctx.ui.notify(`wfrun: ${(e as Error).message}`, "error");
      }
      await render();
    },
  });

  pi.registerCommand("controller", {
    description: "wfrun controllers: /controller [list NAME | get NAME KEY | reconcile NAME KEY | cancel NAME KEY | events NAME KEY]",
    handler: async (args: string, ctx: Ctx) => {
      ctxNow = ctx;
      const words = (args ?? "").trim().split(/\s+/).filter(Boolean);
      const verbs = ["list", "get", "reconcile", "cancel", "events"];
      if (words.length > 0 && !verbs.includes(words[0])) {
        ctx.ui.notify(`wfrun: /controller ${words[0]}: use one of ${verbs.join(", ")} (or nothing to list controllers)`, "error");
        return;
      }
      const cmd = words.length === 0 ? ["controllers"] : ["controller", ...words];
      const result = await pi.exec(argv[0], [...argv.slice(1), ...cmd], { cwd: ctx.cwd });
      const text = (result.code === 0 ? result.stdout : result.stderr || result.stdout).trim();
      ctx.ui.notify(text || "(nothing)", result.code === 0 ? "info" : "error");
    },
  });
}
