// `reaper mcp` with the official MCP TypeScript SDK v1 (2025-11-25) as a real client: list
// tools, call, progress, cancel mid-call (AbortSignal -> notifications/cancelled), timeout,
// exit mid-call. The fake
// codex records every process it starts; none may survive, and no cgroup may be left.
// Run by ci/interop.sh with NODE_PATH pointing at the SDK (installed by ci/install-deps.sh).
const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = require("@modelcontextprotocol/sdk/client/stdio.js");

const root = path.resolve(__dirname, "..", "..");
const target = process.env.CARGO_TARGET_DIR || path.join(root, "target");
const REAPER = process.env.REAPER_BIN || path.join(target, "debug", "reaper");
const FAKE_CODEX = process.env.REAPER_FAKE_CODEX_BIN || path.join(target, "debug", "fake-codex");

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

async function nothingLeft(pids, withinMs = 5000) {
  const mnt = cgroupMount();
  const deadline = Date.now() + withinMs;
  for (;;) {
    const recs = recorded(pids);
    const live = recs.filter(([pid, start]) => alive(pid, start)).map(([pid, , role]) => `${role} (pid ${pid})`);
    const cgs = mnt ? recs.map((r) => r[3]).filter((c) => c && c !== "/").map((c) => path.join(mnt, c)).filter((c) => fs.existsSync(c)) : [];
    if (live.length === 0 && cgs.length === 0) return;
    if (Date.now() > deadline) {
      for (const [pid, start] of recs) if (alive(pid, start)) try { process.kill(Number(pid), "SIGKILL"); } catch {}
      assert.fail(`survivors ${JSON.stringify(live)}, cgroups ${JSON.stringify(cgs)}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function connect(pids, extraArgs = []) {
  // REAPER_COMMAND (a JSON list) starts reaper through what installed it, as a user's client
  // config does: `npx … reaper`.
  const command = process.env.REAPER_COMMAND ? JSON.parse(process.env.REAPER_COMMAND) : [REAPER];
  const transport = new StdioClientTransport({
    command: command[0],
    args: [...command.slice(1), "mcp", "--grace", "1s", "--progress-interval", "200ms", ...extraArgs],
    env: { ...process.env, CODEX_CMD: FAKE_CODEX, FAKE_CODEX_PIDS: pids },
    stderr: "ignore",
  });
  const client = new Client({ name: "reaper-interop", version: "1.0.0" });
  await client.connect(transport);
  return client;
}

function tmpPids() {
  return path.join(fs.mkdtempSync(path.join(os.tmpdir(), "reaper-ts-")), "pids");
}

test("lists codex and codex-reply with schemas", async () => {
  const client = await connect(tmpPids());
  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((t) => t.name).sort(), ["codex", "codex-reply"]);
  for (const t of tools) assert.ok(t.outputSchema && t.outputSchema.properties.threadId);
  await client.close();
});

test("a call returns the answer, thread id and usage", async () => {
  const pids = tmpPids();
  const client = await connect(pids);
  const r = await client.callTool({ name: "codex", arguments: { prompt: "thread T9\nsay hi\ndone" } });
  assert.equal(r.isError, false);
  assert.deepEqual(r.structuredContent, { threadId: "T9", content: "hi" });
  assert.match(r.content[0].text, /^hi\n\n\[codex\] thread_id=T9 status=completed input_tokens=11/);
  await client.close();
  await nothingLeft(pids);
});

test("progress notifications arrive and rise", async () => {
  const pids = tmpPids();
  const client = await connect(pids);
  const seen = [];
  const r = await client.callTool(
    { name: "codex", arguments: { prompt: "thread P9\nitem command_execution\nsleep 1\nsay ok\ndone" } },
    undefined,
    { onprogress: (p) => seen.push(p) },
  );
  assert.equal(r.isError, false);
  assert.ok(seen.length >= 2, JSON.stringify(seen));
  for (let i = 1; i < seen.length; i++) assert.ok(seen[i].progress > seen[i - 1].progress);
  await client.close();
  await nothingLeft(pids);
});

test("cancel mid-call kills the whole tree and the server keeps serving", async () => {
  const pids = tmpPids();
  const client = await connect(pids);
  const ac = new AbortController();
  const call = client.callTool({ name: "codex", arguments: { prompt: "thread C9\nescapee\nchild\nhang" } }, undefined, { signal: ac.signal });
  await new Promise((r) => setTimeout(r, 1000));
  ac.abort("user cancelled");
  await assert.rejects(call);
  await nothingLeft(pids, 1000 + 5000);
  assert.ok(recorded(pids).some((r) => r[2] === "escapee"));
  const r = await client.callTool({ name: "codex", arguments: { prompt: "thread A9\nsay alive\ndone" } });
  assert.equal(r.structuredContent.content, "alive");
  await client.close();
});

test("a timeout ends the call with its error result and kills the whole tree", async () => {
  const pids = tmpPids();
  // 30 "seconds" of 20 ms.
  const client = await connect(pids, ["--test-timeout-unit", "20ms"]);
  const r = await client.callTool({ name: "codex", arguments: { prompt: "thread T9\nescapee\nignore-signals\nhang", timeout_seconds: 30 } });
  assert.equal(r.isError, true);
  assert.match(r.content[0].text, /^\[ERROR\] timeout after 30s/);
  assert.equal(r.structuredContent.threadId, "T9");
  assert.ok(recorded(pids).some((x) => x[2] === "escapee"));
  await client.close();
  await nothingLeft(pids);
});

test("closing the client mid-call leaves nothing behind", async () => {
  const pids = tmpPids();
  const client = await connect(pids);
  const call = client.callTool({ name: "codex", arguments: { prompt: "thread E9\nescapee\nchild\nhang" } }).catch(() => null);
  await new Promise((r) => setTimeout(r, 1000));
  await client.close();
  await call;
  await nothingLeft(pids);
});
