// A Node process that contains a hostile tree (reaper-process's spawn, or an MCP server through
// reaper-process/mcp or the plain SDK transport), says `ready` on stdout with the guardian's
// pid, then ends as MODE says: process.exit, an uncaught exception, or a SIGKILL from the test.
//   node client.mjs MODE DIR
import { createRequire } from "node:module";
import path from "node:path";
import { reaper, hostile, ready, mcpSpec, testDir, stat } from "./helpers.mjs";

const [mode, dir] = process.argv.slice(2);
const say = (o) => process.stdout.write(JSON.stringify(o) + "\n");

async function mcpClient(plain, v2) {
  const sdk = createRequire(path.join(process.env.MCP_SDK_DIR, "x.js"));
  const { Client } = v2
    ? createRequire(path.join(process.env.MCP_SDK_V2_DIR, "x.js"))("@modelcontextprotocol/client")
    : sdk("@modelcontextprotocol/sdk/client/index.js");
  const { StdioClientTransport } = plain
    ? sdk("@modelcontextprotocol/sdk/client/stdio.js")
    : createRequire(import.meta.url)(mcpSpec);
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [path.join(testDir, "hostile-server.mjs")],
    env: { ...process.env, HOSTILE_DIR: dir },
  });
  const client = new Client({ name: "reaper-node-test", version: "1.0.0" });
  await client.connect(transport);
  await client.listTools();
  return { client, transport };
}

let client;
let transport;
if (/^(mcp|mcp2|sdk)-/.test(mode)) {
  ({ client, transport } = await mcpClient(mode.startsWith("sdk-"), mode.startsWith("mcp2-")));
} else {
  const [cmd, args] = hostile(dir, "setsid-grandchild");
  reaper.spawn(cmd, args, { stdio: "ignore" });
  await ready(dir);
}
// The server named for good while it certainly runs (a close may follow at once).
const server = transport ? { pid: transport.pid, start: stat(transport.pid)?.start } : null;
say({ ready: true, guardian: reaper.guardianPid(), server });
const end = mode.replace(/^(mcp|mcp2|sdk)-/, "");
if (end === "close") {
  await client.close();
  say({ closed: true });
} else if (end === "exit") {
  process.exit(0);
} else if (end === "throw") {
  throw new Error("the client crashed (on purpose)");
} else {
  // sigkill: the test kills this process.
  setInterval(() => {}, 1 << 30);
}
