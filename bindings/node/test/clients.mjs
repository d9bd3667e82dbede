// Runs test/client.mjs (a Node process containing a hostile tree) with plain child_process and
// ends it as a test says.
import { spawn } from "node:child_process";
import path from "node:path";
import fs from "node:fs";
import { testDir, stat } from "./helpers.mjs";

export const SDK_DIR = process.env.MCP_SDK_DIR || "/root/.cache/reaper-ci/node/node_modules";
export const SDK_V2_DIR = process.env.MCP_SDK_V2_DIR || "/root/.cache/reaper-ci/node-v2/node_modules";
export const haveSdkV2 = () => fs.existsSync(path.join(SDK_V2_DIR, "@modelcontextprotocol", "client", "package.json"));
export const haveSdk = () => fs.existsSync(path.join(SDK_DIR, "@modelcontextprotocol", "sdk", "package.json"));

/** Starts client.mjs MODE DIR; resolves with { proc, info (its `ready` line), lines, exited }. */
export function startClient(mode, dir, env = {}) {
  const proc = spawn(process.execPath, [path.join(testDir, "client.mjs"), mode, dir], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, MCP_SDK_DIR: SDK_DIR, MCP_SDK_V2_DIR: SDK_V2_DIR, ...env },
  });
  const exited = new Promise((resolve) => proc.on("exit", (code, sig) => resolve({ code, sig })));
  let stderr = "";
  proc.stderr.on("data", (b) => (stderr += b));
  const lines = [];
  let out = "";
  return new Promise((resolve, reject) => {
    proc.stdout.on("data", (b) => {
      out += b;
      let i;
      while ((i = out.indexOf("\n")) >= 0) {
        const line = JSON.parse(out.slice(0, i));
        out = out.slice(i + 1);
        lines.push(line);
        if (line.ready) {
          // The guardian, named for good, so that a test may wait for its end.
          const g = line.guardian && stat(line.guardian);
          const info = { ...line, guardianProc: g ? { pid: line.guardian, start: g.start } : null };
          resolve({ proc, info, lines, exited, stderr: () => stderr });
        }
      }
    });
    exited.then(({ code, sig }) => reject(new Error(`client ${mode} exited (${code ?? sig}) before ready: ${stderr}`)));
  });
}
