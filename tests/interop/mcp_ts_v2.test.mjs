// `reaper mcp` with the MCP TypeScript SDK v2 client (`@modelcontextprotocol/client`, protocol
// 2026-07-28: `server/discover`, per-request `_meta`) and the tasks extension's own client
// (`@modelcontextprotocol/ext-tasks`): list, call, progress, cancel, timeout, and tasks — the
// round trip, `tasks/cancel`, and 50 tasks whose results are read late. The fake codex records
// every process it starts; none may survive, and no cgroup may be left.
// Run by ci/interop.sh; the packages are in REAPER_TS_V2_MODULES (ci/install-deps.sh).
import test from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "..", "..");
const target = process.env.CARGO_TARGET_DIR || path.join(root, "target");
const REAPER = process.env.REAPER_BIN || path.join(target, "debug", "reaper");
const FAKE_CODEX = process.env.REAPER_FAKE_CODEX_BIN || path.join(target, "debug", "fake-codex");
const MODULES =
  process.env.REAPER_TS_V2_MODULES ||
  path.join(os.homedir(), ".cache", "reaper-ci", "node-v2", "node_modules");

// ES modules ignore NODE_PATH: import a package's entry point from MODULES through its
// `exports` map, as node would from inside that folder.
async function importFrom(spec) {
  const parts = spec.split("/");
  const name = parts.slice(0, 2).join("/");
  const sub = parts.length > 2 ? `./${parts.slice(2).join("/")}` : ".";
  const dir = path.join(MODULES, name);
  const pkg = JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8"));
  const entry = pkg.exports[sub].import;
  const file = typeof entry === "string" ? entry : entry.default;
  return import(pathToFileURL(path.join(dir, file)).href);
}

const { Client } = await importFrom("@modelcontextprotocol/client");
const { StdioClientTransport } = await importFrom("@modelcontextprotocol/client/stdio");
const { createTaskSessionFromClient, resultFromTaskOutcome } = await importFrom(
  "@modelcontextprotocol/ext-tasks/client",
);

const VERSION = "2026-07-28";
const CLIENT_INFO = { name: "reaper-interop-v2", version: "1.0.0" };

function cgroupMount() {
  for (const line of fs.readFileSync("/proc/self/mountinfo", "utf8").split("\n")) {
    const [pre, post] = line.split(" - ");
    if (post && post.split(" ")[0] === "cgroup2") return pre.split(" ")[4];
  }
  return null;
}

// Every process fake-codex started: [pid, starttime, role, cgroup].
function recorded(pids) {
  if (!fs.existsSync(pids)) return [];
  return fs.readFileSync(pids, "utf8").trim().split("\n").filter(Boolean).map((l) => l.split(" "));
}

function alive(pid, start) {
  let text;
  try {
    text = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return false;
  }
  const rest = text.slice(text.lastIndexOf(")") + 2).split(" ");
  return rest[19] === start && rest[0] !== "Z" && rest[0] !== "X";
}

async function until(what, ok, withinMs) {
  const deadline = Date.now() + withinMs;
  for (;;) {
    const v = await ok();
    if (v) return v;
    if (Date.now() > deadline) assert.fail(`${what}: not within ${withinMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function nothingLeft(pids, withinMs = 5000) {
  const mnt = cgroupMount();
  const deadline = Date.now() + withinMs;
  for (;;) {
    const recs = recorded(pids);
    const live = recs.filter(([pid, start]) => alive(pid, start)).map(([pid, , role]) => `${role} (pid ${pid})`);
    const cgs = mnt ? recs.map((r) => r[3]).filter((c) => c && c !== "/").map((c) => path.join(mnt, c)).filter((c) => fs.existsSync(c)) : [];
    if (recs.length > 0 && live.length === 0 && cgs.length === 0) return;
    if (Date.now() > deadline) {
      for (const [pid, start] of recs) if (alive(pid, start)) try { process.kill(Number(pid), "SIGKILL"); } catch {}
      assert.fail(`recorded ${recs.length}, survivors ${JSON.stringify(live)}, cgroups ${JSON.stringify(cgs)}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

function kib(pid, field) {
  const line = fs.readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith(field));
  return Number(line.split(/\s+/)[1]);
}

// The host's raw request path ext-tasks needs for 2026-07-28 task traffic (the SDK client's
// own codecs refuse `resultType: "task"`): requests go out on the client's transport with ids
// of their own, and their responses are taken off before the client sees them.
function rawPath(transport) {
  const pending = new Map();
  let n = 0;
  const inner = transport.onmessage;
  transport.onmessage = (msg, extra) => {
    if (msg && typeof msg.id === "string" && pending.has(msg.id) && !("method" in msg)) {
      const settle = pending.get(msg.id);
      pending.delete(msg.id);
      settle("error" in msg ? { kind: "error", error: msg.error } : { kind: "result", result: msg.result });
      return;
    }
    inner?.(msg, extra);
  };
  return async (request, options = {}) => {
    const id = `raw-${++n}`;
    const answer = new Promise((resolve, reject) => {
      pending.set(id, resolve);
      options.signal?.addEventListener("abort", () => {
        pending.delete(id);
        reject(options.signal.reason);
      });
    });
    await transport.send({ ...request, jsonrpc: "2.0", id });
    return answer;
  };
}

// The client is closed after the test whatever happens (its server then stops every call).
async function connect(t, pids, extraArgs = []) {
  const transport = new StdioClientTransport({
    command: REAPER,
    args: ["mcp", "--grace", "1s", "--progress-interval", "200ms", ...extraArgs],
    env: { ...process.env, CODEX_CMD: FAKE_CODEX, FAKE_CODEX_PIDS: pids },
    stderr: "ignore",
  });
  const client = new Client(CLIENT_INFO, { versionNegotiation: { mode: { pin: VERSION } } });
  await client.connect(transport);
  t.after(() => client.close().catch(() => {}));
  const rawDispatch = rawPath(transport);
  const session = () =>
    createTaskSessionFromClient(client, {
      endpointId: "reaper-interop",
      rawDispatch,
      v2RequestFraming: { protocolVersion: VERSION, clientInfo: CLIENT_INFO, clientCapabilities: {} },
    });
  // A plain `tools/call` on the wire, not declaring tasks: the result as the server sends it.
  const rawCall = async (name, args) => {
    const r = await rawDispatch({
      method: "tools/call",
      params: {
        name,
        arguments: args,
        _meta: {
          "io.modelcontextprotocol/protocolVersion": VERSION,
          "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
          "io.modelcontextprotocol/clientCapabilities": {},
        },
      },
    });
    assert.equal(r.kind, "result", JSON.stringify(r));
    return r.result;
  };
  return { client, transport, session, rawDispatch, rawCall };
}

function tmpPids() {
  return path.join(fs.mkdtempSync(path.join(os.tmpdir(), "reaper-ts2-")), "pids");
}

test("2026-07-28: discover, the tasks extension advertised, tools listed", async (t) => {
  const { client } = await connect(t, tmpPids());
  assert.equal(client.getProtocolEra(), "modern");
  assert.deepEqual(client.getServerCapabilities().extensions, { "io.modelcontextprotocol/tasks": {} });
  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((t) => t.name).sort(), ["codex", "codex-reply"]);
  for (const t of tools) assert.ok(t.outputSchema && t.outputSchema.properties.threadId);
  await client.close();
});

test("a plain call (no tasks declared): the result, and progress that rises", async (t) => {
  const pids = tmpPids();
  const { client } = await connect(t, pids);
  const seen = [];
  const r = await client.callTool(
    { name: "codex", arguments: { prompt: "thread P2\nitem command_execution\nsleep 1\nsay hi\ndone" } },
    { onprogress: (p) => seen.push(p) },
  );
  assert.equal(r.isError, false);
  assert.deepEqual(r.structuredContent, { threadId: "P2", content: "hi" });
  assert.match(r.content[0].text, /^hi\n\n\[codex\] thread_id=P2 status=completed input_tokens=11/);
  assert.ok(seen.length >= 2, JSON.stringify(seen));
  for (let i = 1; i < seen.length; i++) assert.ok(seen[i].progress > seen[i - 1].progress);
  for (const p of seen) assert.ok(p.message.length <= 200, p.message);
  await client.close();
  await nothingLeft(pids);
});

test("cancel of a plain call kills the whole tree; the server keeps serving", async (t) => {
  const pids = tmpPids();
  const { client } = await connect(t, pids);
  const ac = new AbortController();
  const call = client.callTool({ name: "codex", arguments: { prompt: "thread C2\nescapee\nignore-signals\nhang" } }, { signal: ac.signal });
  await until("the escapee runs", () => recorded(pids).some((r) => r[2] === "escapee"), 20000);
  ac.abort("user cancelled");
  await assert.rejects(call);
  await nothingLeft(pids, 1000 + 5000);
  const r = await client.callTool({ name: "codex", arguments: { prompt: "thread A2\nsay alive\ndone" } });
  assert.equal(r.structuredContent.content, "alive");
  await client.close();
});

test("a plain call's timeout, and a task's: the same result, the tree gone", async (t) => {
  const pids = tmpPids();
  // 30 "seconds" of 20 ms.
  const { client, session } = await connect(t, pids, ["--test-timeout-unit", "20ms"]);
  const args = { prompt: "thread T2\nescapee\nignore-signals\nhang", timeout_seconds: 30 };
  const plain = await client.callTool({ name: "codex", arguments: args });
  assert.equal(plain.isError, true);
  assert.match(plain.content[0].text, /^\[ERROR\] timeout after 30s/);
  const s = session();
  const exec = await s.callTool("codex", args);
  assert.equal(exec.kind, "task");
  const { outcome } = await exec.settle();
  const { resultType, ...viaTask } = resultFromTaskOutcome(outcome);
  // The SDK drops the wire's `resultType` from a plain result; the task's keeps it.
  assert.equal(resultType, "complete");
  assert.deepEqual(viaTask, plain);
  assert.equal(recorded(pids).filter((r) => r[2] === "escapee").length, 2);
  await nothingLeft(pids);
  await s.close();
  await client.close();
});

test("task round trip: the same result as the plain call, for codex and codex-reply", async (t) => {
  const pids = tmpPids();
  const { client, session, rawCall } = await connect(t, pids);
  const s = session();
  for (const [tool, args] of [
    ["codex", { prompt: "thread R2\nitem command_execution\nsay hello\ndone" }],
    ["codex", { prompt: "thread F2\nfail boom\nexit 1" }],
    ["codex-reply", { thread_id: "R2", prompt: "thread\nsay again\ndone" }],
  ]) {
    const wire = await rawCall(tool, args);
    const plain = await client.callTool({ name: tool, arguments: args });
    const exec = await s.callTool(tool, args);
    assert.equal(exec.kind, "task", tool);
    const { outcome } = await exec.settle();
    assert.equal(outcome.status, "completed");
    const viaTask = resultFromTaskOutcome(outcome);
    // Exactly what the plain call put on the wire; the SDK's plain result is that without
    // `resultType`.
    assert.deepEqual(viaTask, wire, tool);
    const { resultType, ...rest } = viaTask;
    assert.equal(resultType, "complete");
    assert.deepEqual(rest, plain, tool);
  }
  await s.close();
  await client.close();
  await nothingLeft(pids);
});

test("tasks/cancel: a codex that ignores SIGINT with a setsid'd TERM-ignoring grandchild ends cancelled within grace + 1 s, nothing left", async (t) => {
  const pids = tmpPids();
  const { client, session } = await connect(t, pids); // --grace 1s
  const s = session();
  const exec = await s.callTool("codex", { prompt: "thread K2\nsay partial\nescapee\nignore-signals\nhang" });
  assert.equal(exec.kind, "task");
  const taskId = exec.handle.taskId;
  await until("the escapee runs", () => recorded(pids).some((r) => r[2] === "escapee"), 20000);
  const procs = recorded(pids);
  const [epid, estart] = procs.find((r) => r[2] === "escapee");
  assert.ok(alive(epid, estart), "the escapee is alive before the cancel");
  const controller = s.task(taskId);
  const working = await controller.snapshot();
  assert.equal(working.status, "working");
  assert.match(working.statusMessage, /^codex running for \d+s · \d+ process/);
  const t0 = Date.now();
  await exec.cancel();
  const view = await until("cancelled", async (t) => {
    const v = await controller.snapshot();
    return v.status === "working" ? null : v;
  }, 10000);
  const took = Date.now() - t0;
  assert.equal(view.status, "cancelled");
  assert.ok(took < 2000, `cancelled after ${took} ms, over grace + 1 s`);
  assert.match(view.statusMessage, /^\[ERROR\] cancelled by the client/);
  assert.match(view.statusMessage, /\[codex\] thread_id=K2/);
  assert.match(view.statusMessage, /last agent message:\npartial/);
  // Dead when the task said so.
  const live = procs.filter(([pid, start]) => alive(pid, start));
  assert.deepEqual(live, []);
  await nothingLeft(pids);
  await s.close();
  await client.close();
});

test("50 concurrent tasks, results read late: the server stays under its memory bound", async (t) => {
  const pids = tmpPids();
  const resultsMax = 16; // MiB: --task-results-max
  const running = 4; // --max-concurrent
  const { client, transport, session } = await connect(t, pids, [
    "--task-results-max", `${resultsMax}M`, "--max-concurrent", `${running}`,
  ]);
  const pid = transport.pid;
  const warm = await client.callTool({ name: "codex", arguments: { prompt: "thread W\nsay-kib 2048\ndone" } });
  assert.equal(warm.structuredContent.content.length, 2048 * 1024);
  const before = kib(pid, "VmHWM:");
  const s = session();
  const n = 50;
  const ids = [];
  for (let i = 0; i < n; i++) {
    // 2 MiB answers: each result holds one twice (text and structuredContent), ~4 MiB.
    const exec = await s.callTool("codex", { prompt: `thread M${i}\nsay-kib 2048 ${String.fromCharCode(97 + (i % 26))}\ndone` });
    assert.equal(exec.kind, "task");
    ids.push(exec.handle.taskId);
    await exec.detach(); // no polling: the results wait in the server
  }
  // Every codex ran and is gone before the first result is read.
  await until(`${n} codex runs over`, () => {
    const recs = recorded(pids).filter((r) => r[2] === "codex");
    return recs.length === n + 1 && recs.every(([p, st]) => !alive(p, st));
  }, 120000);
  const kept = [];
  const expired = [];
  for (const [i, id] of ids.entries()) {
    try {
      const outcome = await s.task(id).result();
      const r = resultFromTaskOutcome(outcome);
      assert.equal(r.structuredContent.threadId, `M${i}`);
      assert.equal(r.structuredContent.content.length, 2048 * 1024);
      assert.equal(r.structuredContent.content[0], String.fromCharCode(97 + (i % 26)));
      kept.push(i);
    } catch (e) {
      assert.match(String(e.message), /Task has expired: newer results/);
      expired.push(i);
    }
  }
  const after = kib(pid, "VmHWM:");
  const grewMiB = (after - before) / 1024;
  // The bound: the results kept (16 MiB, plus the newest) and, per running call, its
  // answer in codex's stream and in its result (~4 x 2 MiB), with room for the allocator.
  const bound = resultsMax + 4 + running * 8 + 16;
  console.log(`# 50 tasks x 4 MiB results: peak RSS ${before} -> ${after} KiB (+${grewMiB.toFixed(1)} MiB, bound ${bound} MiB); kept ${kept.length}, expired ${expired.length}`);
  assert.ok(grewMiB < bound, `peak RSS grew by ${grewMiB} MiB`);
  // What fits in the bound was kept (the first to finish went first: cli/tests/mcp_tasks.rs).
  assert.ok(kept.length >= 3, JSON.stringify(kept));
  assert.ok(kept.length * 4 <= resultsMax + 4, `kept ${kept.length} results of ~4 MiB`);
  await s.close();
  await client.close();
  await nothingLeft(pids);
});
