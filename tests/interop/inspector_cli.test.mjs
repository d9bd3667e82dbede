// `reaper mcp` driven by the MCP Inspector's CLI (`mcp-inspector --cli`), in both protocol
// eras: on 2026-07-28 it declares the tasks extension, so a `codex` call runs as a task that
// it polls to its end; on 2025-11-25 the same call is plain. Both must return the same result.
// Run by ci/interop.sh; the Inspector is REAPER_INSPECTOR (ci/install-deps.sh).
import test from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const target = process.env.CARGO_TARGET_DIR || path.join(root, "target");
const REAPER = process.env.REAPER_BIN || path.join(target, "debug", "reaper");
const FAKE_CODEX = process.env.REAPER_FAKE_CODEX_BIN || path.join(target, "debug", "fake-codex");
const INSPECTOR =
  process.env.REAPER_INSPECTOR ||
  path.join(os.homedir(), ".cache", "reaper-ci", "inspector", "node_modules", ".bin", "mcp-inspector");

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

// One Inspector run against a fresh `reaper mcp` (info logs on, to see how a call ran).
function inspect(era, pids, ...args) {
  const r = spawnSync(
    INSPECTOR,
    [
      "--cli", "--protocol-era", era, "--format", "json", ...args,
      "-e", `CODEX_CMD=${FAKE_CODEX}`, "-e", `FAKE_CODEX_PIDS=${pids}`, "-e", "RUST_LOG=info",
      REAPER, "mcp",
    ],
    { encoding: "utf8", timeout: 60000, stdio: ["ignore", "pipe", "pipe"] },
  );
  assert.equal(r.status, 0, `${era} ${args.join(" ")}: exit ${r.status}\n${r.stdout}\n${r.stderr}`);
  return { out: JSON.parse(r.stdout), log: r.stderr };
}

function tmpPids() {
  return path.join(fs.mkdtempSync(path.join(os.tmpdir(), "reaper-insp-")), "pids");
}

test("the Inspector lists the tools in both eras", () => {
  for (const era of ["modern", "legacy"]) {
    const { out } = inspect(era, tmpPids(), "--method", "tools/list");
    assert.deepEqual(out.result.tools.map((t) => t.name).sort(), ["codex", "codex-reply"], era);
  }
});

test("the Inspector's task round trip (2026-07-28) returns what its plain call (2025-11-25) does", () => {
  const pids = tmpPids();
  const call = ["--method", "tools/call", "--tool-name", "codex", "--tool-args-json",
    JSON.stringify({ prompt: "thread I1\nitem command_execution\nsay hi from a task\ndone" })];
  const modern = inspect("modern", pids, ...call);
  const legacy = inspect("legacy", pids, ...call);
  assert.match(modern.log, /runs as a task/, "the modern call did not run as a task");
  assert.doesNotMatch(legacy.log, /runs as a task/);
  const { resultType, ...viaTask } = modern.out.result;
  assert.equal(resultType, "complete");
  assert.deepEqual(viaTask, legacy.out.result);
  assert.deepEqual(viaTask.structuredContent, { threadId: "I1", content: "hi from a task" });
  const recs = fs.readFileSync(pids, "utf8").trim().split("\n").map((l) => l.split(" "));
  assert.equal(recs.length, 2);
  assert.deepEqual(recs.filter(([pid, start]) => alive(pid, start)), []);
});
