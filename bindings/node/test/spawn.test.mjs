// spawn() and run(): each path that ends a run ends the whole hostile tree. Every test proves
// its hostile processes ran (the fixture's pid file, start times) before asserting they are
// gone; none of these trees dies with plain child_process (a setsid'd, TERM-ignoring
// grandchild, a double-forked daemon, a fork storm, a process holding the stdout pipe).
import { test } from "node:test";
import assert from "node:assert/strict";
import vm from "node:vm";
import v8 from "node:v8";
import {
  reaper, needFixture, scratch, hostile, ready, survivors, proveRan, cleanup, exitOf, closeOf, until, recorded, running,
} from "./helpers.mjs";

test("timeout ends the tree: a setsid'd grandchild that ignores SIGTERM", async (t) => {
  if (!needFixture(t)) return;
  const dir = scratch();
  t.after(() => cleanup(dir));
  const [cmd, args] = hostile(dir, "setsid-grandchild");
  // Long enough for the tree to be built first (proved below), short for a test.
  const child = reaper.spawn(cmd, args, { stdio: "ignore", timeout: 3000, grace: 200 });
  // An exit before the tree is built fails below (proveRan), rather than hanging here.
  await ready(dir, () => child.outcome !== null);
  const { code, sig } = child.outcome ? { code: child.exitCode, sig: child.signalCode } : await exitOf(child);
  proveRan(assert, dir, ["leader", "child", "grandchild"]);
  assert.equal(child.outcome.stopReason, "timeout");
  assert.equal(code, null);
  assert.equal(sig, "SIGTERM");
  assert.deepEqual(child.outcome.survivors, []);
  assert.deepEqual(survivors(dir), []);
});

test("kill('SIGTERM') ends the tree: SIGTERM to all, the grace, then SIGKILL", async (t) => {
  if (!needFixture(t)) return;
  const dir = scratch();
  t.after(() => cleanup(dir));
  const [cmd, args] = hostile(dir, "setsid-grandchild");
  const child = reaper.spawn(cmd, args, { stdio: "ignore", grace: 200 });
  await ready(dir);
  proveRan(assert, dir, ["leader", "child", "grandchild"]);
  assert.equal(child.kill("SIGTERM"), true);
  assert.equal(child.killed, true);
  await exitOf(child);
  assert.equal(child.outcome.stopReason, "signal");
  assert.equal(child.signalCode, "SIGTERM");
  // The grandchild ignored SIGTERM: it took the SIGKILL after the grace.
  assert.ok(child.outcome.killed >= 3, `killed ${child.outcome.killed}`);
  assert.deepEqual(survivors(dir), []);
});

test("kill('SIGKILL') ends the tree at once: a double-forked daemon", async (t) => {
  if (!needFixture(t)) return;
  const dir = scratch();
  t.after(() => cleanup(dir));
  const [cmd, args] = hostile(dir, "daemon");
  const child = reaper.spawn(cmd, args, { stdio: "ignore" });
  await ready(dir);
  proveRan(assert, dir, ["leader", "daemon"]);
  child.kill("SIGKILL");
  const { sig } = await exitOf(child);
  assert.equal(sig, "SIGKILL");
  assert.equal(child.outcome.stopReason, "cancel");
  assert.deepEqual(survivors(dir), []);
});

test("kill() of a fork storm still forking", async (t) => {
  if (!needFixture(t)) return;
  const dir = scratch();
  t.after(() => cleanup(dir));
  const [cmd, args] = hostile(dir, "fork-storm", "400", "--ready-at", "40");
  const child = reaper.spawn(cmd, args, { stdio: "ignore", grace: 200 });
  await ready(dir);
  assert.ok(recorded(dir).filter((p) => p.role === "storm").length >= 1, "the storm forked");
  child.kill();
  await exitOf(child);
  assert.deepEqual(child.outcome.survivors, []);
  assert.deepEqual(survivors(dir), []);
});

test("a process holding the stdout pipe: 'close' comes, the holder is gone", async (t) => {
  if (!needFixture(t)) return;
  const dir = scratch();
  t.after(() => cleanup(dir));
  const [cmd, args] = hostile(dir, "hold-stdout");
  const child = reaper.spawn(cmd, args, { stdio: ["ignore", "pipe", "pipe"] });
  // With child_process the holder keeps the pipe open and `close` never comes.
  const { code } = await closeOf(child);
  proveRan(assert, dir, ["leader", "holder"]);
  assert.equal(code, 0);
  assert.equal(child.outcome.stopReason, "exited");
  assert.ok(child.outcome.killed >= 1, "the holder was killed when the leader exited");
  assert.deepEqual(survivors(dir), []);
});

test("run() with a timeout: the outcome, and a tree with setsid'd processes gone", async (t) => {
  if (!needFixture(t)) return;
  const dir = scratch();
  t.after(() => cleanup(dir));
  const [cmd, args] = hostile(dir, "tree", "12", "--setsid-every", "3");
  let over = false;
  const done = reaper.run(cmd, args, { timeout: 3000, grace: 200, encoding: "utf8" }).finally(() => (over = true));
  await ready(dir, () => over);
  const r = await done;
  assert.equal(recorded(dir).length, 12, "the 12 processes of the tree ran");
  assert.equal(r.outcome.stopReason, "timeout");
  assert.ok(r.outcome.killed >= 12, `killed ${r.outcome.killed}`);
  assert.deepEqual(survivors(dir), []);
});

test("run() resolves with the output and the exit code", async () => {
  const r = await reaper.run("sh", ["-c", "cat; echo err >&2; exit 3"], { input: "in\n", encoding: "utf8" });
  assert.equal(r.stdout, "in\n");
  assert.equal(r.stderr, "err\n");
  assert.equal(r.exitCode, 3);
  assert.equal(r.outcome.stopReason, "exited");
});

test("a missing program: 'error' with ENOENT, as child_process says it", async () => {
  const child = reaper.spawn("reaper-node-test-no-such-program", ["x"]);
  const err = await new Promise((resolve) => child.on("error", resolve));
  assert.equal(err.code, "ENOENT");
  assert.equal(err.errno, -2);
  assert.equal(err.syscall, "spawn reaper-node-test-no-such-program");
  assert.equal(child.pid, undefined);
  await assert.rejects(reaper.run("reaper-node-test-no-such-program"), { code: "ENOENT" });
});

test("garbage collection of an unreferenced handle kills its tree", async (t) => {
  if (!needFixture(t)) return;
  const dir = scratch();
  t.after(() => cleanup(dir));
  v8.setFlagsFromString("--expose-gc");
  const gc = vm.runInNewContext("gc");
  const [cmd, args] = hostile(dir, "setsid-grandchild");
  (() => {
    const child = reaper.spawn(cmd, args, { stdio: "ignore" });
    child.unref();
  })();
  await ready(dir);
  proveRan(assert, dir, ["leader", "child", "grandchild"]);
  // Collected, finalized (the addon's handle dropped: SIGKILL for the tree), then gone.
  await until(() => {
    gc();
    return recorded(dir).every((p) => !running(p));
  });
});

test("an aborted options.signal ends the tree and emits an AbortError", async (t) => {
  if (!needFixture(t)) return;
  const dir = scratch();
  t.after(() => cleanup(dir));
  const [cmd, args] = hostile(dir, "setsid-grandchild");
  const ac = new AbortController();
  const child = reaper.spawn(cmd, args, { stdio: "ignore", grace: 200, signal: ac.signal });
  const error = new Promise((resolve) => child.on("error", resolve));
  await ready(dir);
  proveRan(assert, dir, ["leader", "child", "grandchild"]);
  ac.abort();
  assert.equal((await error).name, "AbortError");
  await exitOf(child);
  assert.deepEqual(survivors(dir), []);
});

test("stdio entries as fds: the command writes into the file, a closed fd is an error", async (t) => {
  const fs = await import("node:fs");
  const path = await import("node:path");
  const dir = scratch();
  t.after(() => cleanup(dir));
  const file = path.join(dir, "out");
  const fd = fs.openSync(file, "w");
  const child = reaper.spawn("sh", ["-c", "echo into-the-file"], { stdio: ["ignore", fd, "inherit"] });
  fs.closeSync(fd);
  await closeOf(child);
  assert.equal(fs.readFileSync(file, "utf8"), "into-the-file\n");
  const bad = reaper.spawn("true", [], { stdio: ["ignore", 987, "ignore"] });
  const err = await new Promise((resolve) => bad.on("error", resolve));
  assert.match(err.message, /fd 987/);
});

test("kill('SIGINT') sends SIGINT to the whole tree, then the grace and SIGKILL", async (t) => {
  if (!needFixture(t)) return;
  const dir = scratch();
  t.after(() => cleanup(dir));
  const [cmd, args] = hostile(dir, "tree", "8", "--setsid-every", "3");
  const child = reaper.spawn(cmd, args, { stdio: "ignore", grace: 200 });
  await ready(dir);
  assert.equal(recorded(dir).length, 8, "the 8 processes of the tree ran");
  child.kill("SIGINT");
  const { sig } = await exitOf(child);
  assert.equal(sig, "SIGINT");
  assert.equal(child.outcome.stopReason, "signal");
  assert.equal(child.outcome.receivedSignalNumber, 2);
  assert.deepEqual(survivors(dir), []);
});
