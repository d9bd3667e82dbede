// A stdio MCP server that starts a hostile tree before it answers `initialize`: the fixture's
// setsid'd, TERM-ignoring grandchild (pids in $HOSTILE_DIR/pids). It exits when its stdin ends,
// leaving that tree behind unless something contains it. Minimal JSON-RPC: initialize, ping,
// tools/list; notifications are ignored.
import { spawn } from "node:child_process";
import { hostile, ready } from "./helpers.mjs";

const dir = process.env.HOSTILE_DIR;
const [cmd, args] = hostile(dir, "setsid-grandchild");
spawn(cmd, args, { stdio: "ignore" }).unref();
await ready(dir);

let buf = "";
process.stdin.on("data", (chunk) => {
  buf += chunk;
  let i;
  while ((i = buf.indexOf("\n")) >= 0) {
    const line = buf.slice(0, i);
    buf = buf.slice(i + 1);
    if (!line.trim()) continue;
    const msg = JSON.parse(line);
    if (msg.id === undefined) continue;
    let result = {};
    if (msg.method === "initialize") {
      result = {
        protocolVersion: msg.params.protocolVersion,
        capabilities: { tools: {} },
        serverInfo: { name: "hostile", version: "1.0.0" },
      };
    } else if (msg.method === "tools/list") {
      result = { tools: [] };
    }
    process.stdout.write(JSON.stringify({ jsonrpc: "2.0", id: msg.id, result }) + "\n");
  }
});
process.stdin.on("end", () => process.exit(0));
