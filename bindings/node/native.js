// Loads the addon (the Rust library `reaper` behind this package): $REAPER_NODE_ADDON when set
// (a development build, target/debug/libreaper_node.so), else `reaper.PLATFORM.node` beside this
// file, else the per-platform package npm installed as an optional dependency, as esbuild ships
// its binaries.
"use strict";
const fs = require("node:fs");
const path = require("node:path");

const PLATFORMS = ["linux-x64-gnu", "linux-arm64-gnu", "linux-x64-musl", "linux-arm64-musl"];

function libc() {
  if (process.platform !== "linux") return "";
  // glibc's Node says its version in the report's header; musl's says none.
  const header = process.report && process.report.getReport().header;
  return header && header.glibcVersionRuntime ? "gnu" : "musl";
}

function platform() {
  return `${process.platform}-${process.arch}-${libc()}`;
}

function dlopen(file) {
  const m = { exports: {} };
  process.dlopen(m, file);
  return m.exports;
}

function load() {
  if (process.env.REAPER_NODE_ADDON) return dlopen(path.resolve(process.env.REAPER_NODE_ADDON));
  const key = platform();
  const local = path.join(__dirname, `reaper.${key}.node`);
  if (fs.existsSync(local)) return dlopen(local);
  if (!PLATFORMS.includes(key)) {
    throw new Error(
      `reaper-process has no build for ${key} (Linux x64 and arm64, glibc and musl); ` +
        "build bindings/node with cargo and set REAPER_NODE_ADDON to the library",
    );
  }
  try {
    return require(`reaper-process-${key}`);
  } catch (e) {
    if (e && e.code !== "MODULE_NOT_FOUND") throw e;
    throw new Error(
      `reaper-process: the package reaper-process-${key}, which carries the addon for this ` +
        "platform, is not installed: npm installs it as an optional dependency, so reinstall " +
        "without --omit=optional, or set REAPER_NODE_ADDON to a build of the addon",
    );
  }
}

module.exports = { native: load(), platform, PLATFORMS };
