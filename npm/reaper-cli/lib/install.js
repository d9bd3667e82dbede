// postinstall: puts this platform's binary in place of bin/reaper, the JavaScript launcher, so
// that `reaper` and `npx reaper-cli` start reaper itself: no node process in between to hold
// memory or to stand between reaper and the signals and exit status it is about. Where that
// fails (no platform package, a read-only install), the launcher stays and does the same job.
"use strict";
const fs = require("node:fs");
const { execFileSync } = require("node:child_process");
const { binaryPath, shim } = require("./binary.js");

function main() {
  let bin;
  try {
    bin = binaryPath();
  } catch (e) {
    console.warn(String(e.message || e));
    return;
  }
  const version = require("../package.json").version;
  const tmp = `${shim}.${process.pid}.tmp`;
  try {
    try {
      fs.linkSync(bin, tmp);
    } catch {
      fs.copyFileSync(bin, tmp);
    }
    fs.chmodSync(tmp, 0o755);
    // Only a binary that runs here and is this package's version replaces the launcher.
    const out = execFileSync(tmp, ["--version"], { encoding: "utf8" }).trim();
    if (out !== `reaper ${version}`) throw new Error(`${bin} says "${out}", not "reaper ${version}"`);
    fs.renameSync(tmp, shim);
  } catch (e) {
    try {
      fs.unlinkSync(tmp);
    } catch {}
    console.warn(`reaper-cli: keeping the JavaScript launcher (${e.message || e})`);
  }
}

main();
