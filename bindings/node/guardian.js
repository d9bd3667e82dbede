// The guardian process: Node itself, run by the first spawn with this process's pid and start
// time. It waits for that process to end, however it ends (SIGKILL included), then kills and
// removes what its runs left (reaper::Guardian::serve). It loads the addon only.
"use strict";
const { native } = require("./native.js");

process.exitCode = native.guardianServe(process.argv[2], process.argv[3]);
