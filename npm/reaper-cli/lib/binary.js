// Where this platform's reaper binary is: in the per-platform package npm installed beside this
// one (an optional dependency whose `os` and `cpu` match), or at $REAPER_BINARY_PATH.
"use strict";
const path = require("node:path");

const PACKAGES = {
  "linux x64": "reaper-cli-linux-x64",
  "linux arm64": "reaper-cli-linux-arm64",
};

function binaryPath() {
  if (process.env.REAPER_BINARY_PATH) return process.env.REAPER_BINARY_PATH;
  const key = `${process.platform} ${process.arch}`;
  const pkg = PACKAGES[key];
  if (!pkg) {
    throw new Error(
      `reaper-cli has no binary for ${process.platform}-${process.arch} (Linux x64 and arm64 only); ` +
        "build reaper from source with cargo, or set REAPER_BINARY_PATH to a reaper binary",
    );
  }
  try {
    return require.resolve(`${pkg}/bin/reaper`);
  } catch {
    throw new Error(
      `reaper-cli: the package ${pkg}, which carries the reaper binary for this platform, is not ` +
        "installed: npm installs it as an optional dependency, so reinstall without " +
        "--omit=optional (--no-optional), or set REAPER_BINARY_PATH to a reaper binary",
    );
  }
}

module.exports = { binaryPath, PACKAGES, shim: path.join(__dirname, "..", "bin", "reaper") };
