// Shared by the tests: the hostile fixture (reaper's testkit `reaper-fixture`, or the reaper
// binary's hidden `reaper fixture`), its pid files, and the look at /proc that proves a
// recorded process ran and is gone. Cleanup kills only processes a test recorded, after
// checking their start time again.
import { createRequire } from "node:module";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);

/** What the tests import: $REAPER_PROCESS_MODULE (`reaper-process` once installed), else this checkout's. */
export const moduleSpec = process.env.REAPER_PROCESS_MODULE || path.join(here, "..", "index.js");
export const mcpSpec = process.env.REAPER_PROCESS_MODULE
  ? `${process.env.REAPER_PROCESS_MODULE}/mcp`
  : path.join(here, "..", "mcp.js");
export const reaper = require(moduleSpec);

/** The fixture's command: [program, ...args before the scenario], or null. */
export function fixture() {
  if (process.env.REAPER_FIXTURE) return [process.env.REAPER_FIXTURE];
  if (process.env.REAPER_BIN) return [process.env.REAPER_BIN, "fixture"];
  const built = path.join(here, "..", "..", "..", "target", "debug", "reaper-fixture");
  return fs.existsSync(built) ? [built] : null;
}

/** Skips test `t` unless the fixture is there: `skipped: NAME: WHY`. */
export function needFixture(t) {
  const f = fixture();
  if (!f) {
    const why = "no hostile fixture (set REAPER_FIXTURE to target/debug/reaper-fixture, or REAPER_BIN to reaper)";
    console.log(`skipped: ${t.name}: ${why}`);
    t.skip(why);
  }
  return f;
}

/** A fresh directory for one test's pid and ready files. */
export function scratch() {
  return fs.mkdtempSync(path.join(os.tmpdir(), "reaper-node-test-"));
}

/** argv of the fixture SCENARIO writing its pids to DIR/pids and its readiness to DIR/ready. */
export function hostile(dir, ...scenario) {
  const [program, ...pre] = fixture();
  return [
    program,
    [...pre, "--pids", path.join(dir, "pids"), "--ready", path.join(dir, "ready"), ...scenario],
  ];
}

/** Field 22 of /proc/PID/stat (the start time) and the state, or null once it is gone. */
export function stat(pid) {
  let text;
  try {
    text = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return null;
  }
  const fields = text.slice(text.lastIndexOf(")") + 2).split(" ");
  return { state: fields[0], start: fields[19] };
}

/** The processes the fixture recorded: { pid, start, role }. */
export function recorded(dir) {
  let text = "";
  try {
    text = fs.readFileSync(path.join(dir, "pids"), "utf8");
  } catch {
    return [];
  }
  return text
    .split("\n")
    .filter(Boolean)
    .map((l) => {
      const [pid, start, role] = l.split(" ");
      return { pid: Number(pid), start, role };
    });
}

/** Whether the recorded process still runs (same pid, same start time, not a zombie). */
export function running(p) {
  const s = stat(p.pid);
  return s !== null && s.start === p.start && s.state !== "Z";
}

/** The recorded processes still running. */
export function survivors(dir) {
  return recorded(dir).filter(running);
}

/** Resolves once `check()` is true, looking again on each turn of the event loop (bounded by
 * the test's own timeout, never by a time of ours). */
export async function until(check, stop = () => false) {
  while (!check() && !stop()) await new Promise((r) => setTimeout(r, 20));
}

/** Resolves once the fixture says its tree is built (or `stop()` says to look no more). */
export function ready(dir, stop) {
  return until(() => fs.existsSync(path.join(dir, "ready")), stop);
}

/** Kills what the test recorded and still runs (pid and start time checked again), then
 * removes the test's directory. */
export function cleanup(dir) {
  for (const p of recorded(dir)) {
    if (running(p)) {
      try {
        process.kill(p.pid, "SIGKILL");
      } catch {
        // gone meanwhile
      }
    }
  }
  fs.rmSync(dir, { recursive: true, force: true });
}

/** Every role the test expects, each recorded: proof the hostile processes ran. */
export function proveRan(assert, dir, roles) {
  const seen = recorded(dir).map((p) => p.role);
  for (const r of roles) assert.ok(seen.includes(r), `the fixture's ${r} ran (recorded: ${seen.join(", ")})`);
}

export const exitOf = (child) => new Promise((resolve) => child.once("exit", (code, sig) => resolve({ code, sig })));
export const closeOf = (child) => new Promise((resolve) => child.once("close", (code, sig) => resolve({ code, sig })));
export const testDir = here;
