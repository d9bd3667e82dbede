// reaper-process/mcp's StdioClientTransport with the MCP TypeScript SDK's Client (v1), against a
// server that starts a setsid'd, TERM-ignoring grandchild: closing the client, its crash (an
// uncaught exception) and its SIGKILL leave nothing of the server's tree. The SDK's own
// StdioClientTransport against the same server is measured too: it leaks (not a failure, a
// figure for docs/node.md; the leak is cleaned up by recorded pid and start time).
import { test } from "node:test";
import assert from "node:assert/strict";
import { needFixture, scratch, proveRan, survivors, recorded, cleanup, until, running } from "./helpers.mjs";
import { startClient, haveSdk, haveSdkV2, SDK_DIR, SDK_V2_DIR } from "./clients.mjs";

function needSdk(t) {
  if (haveSdk()) return true;
  const why = `the MCP TypeScript SDK is not in ${SDK_DIR} (set MCP_SDK_DIR)`;
  console.log(`skipped: ${t.name}: ${why}`);
  t.skip(why);
  return false;
}

/** The server itself (not in the fixture's pid file), named for good by the client. */
function server(c) {
  const s = c.info.server;
  return s && s.pid && s.start ? s : null;
}

test("transport close(): the server's whole tree is gone when it resolves", async (t) => {
  if (!needFixture(t) || !needSdk(t)) return;
  const dir = scratch();
  t.after(() => cleanup(dir));
  const c = await startClient("mcp-close", dir);
  proveRan(assert, dir, ["leader", "child", "grandchild"]);
  const srv = server(c);
  assert.ok(srv, "the server runs");
  await until(() => c.lines.some((l) => l.closed));
  assert.deepEqual(survivors(dir), []);
  assert.equal(running(srv), false);
  assert.equal((await c.exited).code, 0);
});

test("the v2 client (@modelcontextprotocol/client) through the transport: close() leaves nothing", async (t) => {
  if (!needFixture(t) || !needSdk(t)) return;
  if (!haveSdkV2()) {
    const why = `the MCP TypeScript SDK v2 client is not in ${SDK_V2_DIR} (set MCP_SDK_V2_DIR)`;
    console.log(`skipped: ${t.name}: ${why}`);
    t.skip(why);
    return;
  }
  const dir = scratch();
  t.after(() => cleanup(dir));
  const c = await startClient("mcp2-close", dir);
  proveRan(assert, dir, ["leader", "child", "grandchild"]);
  const srv = server(c);
  assert.ok(srv, "the server runs");
  await until(() => c.lines.some((l) => l.closed));
  assert.deepEqual(survivors(dir), []);
  assert.equal(running(srv), false);
});

for (const [mode, how] of [
  ["mcp-throw", "an uncaught exception in the client"],
  ["mcp-sigkill", "SIGKILL of the client"],
]) {
  test(`${how} leaves nothing of the server's tree`, async (t) => {
    if (!needFixture(t) || !needSdk(t)) return;
    const dir = scratch();
    t.after(() => cleanup(dir));
    const c = await startClient(mode, dir);
    proveRan(assert, dir, ["leader", "child", "grandchild"]);
    const srv = server(c);
    assert.ok(srv, "the server runs");
    if (mode === "mcp-sigkill") c.proc.kill("SIGKILL");
    const end = await c.exited;
    if (mode === "mcp-throw") assert.equal(end.code, 1);
    else assert.equal(end.sig, "SIGKILL");
    await until(() => survivors(dir).length === 0 && !running(srv));
  });
}

for (const [mode, how] of [
  ["sdk-close", "close()"],
  ["sdk-throw", "an uncaught exception in the client"],
  ["sdk-sigkill", "SIGKILL of the client"],
]) {
  test(`measurement: the SDK's own StdioClientTransport, ${how}`, async (t) => {
    if (!needFixture(t) || !needSdk(t)) return;
    const dir = scratch();
    const c = await startClient(mode, dir);
    const srv = server(c);
    t.after(() => {
      cleanup(dir);
      if (srv && running(srv)) process.kill(srv.pid, "SIGKILL");
    });
    proveRan(assert, dir, ["leader", "child", "grandchild"]);
    if (mode === "sdk-sigkill") c.proc.kill("SIGKILL");
    await c.exited;
    // The server's own tree (the server itself exits when its stdin ends, sooner or later).
    const left = survivors(dir).map((p) => p.role);
    const line = `measurement: plain SDK StdioClientTransport, ${how}: ${left.length} of the server's ${recorded(dir).length} descendants left running (${left.join(", ") || "none"})`;
    t.diagnostic(line);
  });
}
