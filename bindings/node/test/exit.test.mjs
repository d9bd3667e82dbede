// Node's own end leaves no tree: process.exit and an uncaught exception (the library's exit
// hook; the guardian is off, to prove the hook alone does it), and a SIGKILL of Node (the
// guardian: a Node process of its own, reaper::Guardian::serve). Each client contains the
// fixture's setsid'd, TERM-ignoring grandchild; with child_process it would survive each.
import { test } from "node:test";
import assert from "node:assert/strict";
import { needFixture, scratch, proveRan, survivors, cleanup, until, running } from "./helpers.mjs";
import { startClient } from "./clients.mjs";

for (const [mode, how] of [
  ["exit", "process.exit()"],
  ["throw", "an uncaught exception"],
]) {
  test(`${how} in Node leaves no tree (the exit hook, no guardian)`, async (t) => {
    if (!needFixture(t)) return;
    const dir = scratch();
    t.after(() => cleanup(dir));
    const c = await startClient(mode, dir, { REAPER_NODE_GUARDIAN: "0" });
    proveRan(assert, dir, ["leader", "child", "grandchild"]);
    assert.equal(c.info.guardian, null);
    const { code } = await c.exited;
    assert.equal(code, mode === "exit" ? 0 : 1);
    // The hook killed the tree before Node was gone: nothing to wait for.
    assert.deepEqual(survivors(dir), []);
  });
}

for (const signal of ["SIGKILL", "SIGTERM"]) {
  test(`${signal} of Node leaves no tree (the guardian)`, async (t) => {
    if (!needFixture(t)) return;
    const dir = scratch();
    t.after(() => cleanup(dir));
    const c = await startClient("sigkill", dir);
    proveRan(assert, dir, ["leader", "child", "grandchild"]);
    assert.ok(c.info.guardianProc, "a guardian runs");
    c.proc.kill(signal);
    const { sig } = await c.exited;
    // Node's default for either: death by the signal, no exit hook.
    assert.equal(sig, signal);
    // The guardian sees Node gone, kills the run's cgroup, and exits.
    await until(() => survivors(dir).length === 0);
    await until(() => !running(c.info.guardianProc));
  });
}
