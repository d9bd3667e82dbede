// The overhead of reaper-process's spawn('/bin/true') to its exit event, against
// child_process.spawn('/bin/true'), in one Node process, interleaved (the guardian started
// before the first measured spawn). Prints a markdown table; with --out FILE also puts it into
// FILE between `bench-node:begin`/`bench-node:end` (ci/bench.sh's full run: docs/BENCHMARKS.md).
//   REAPER_NODE_ADDON=… node ci/bench-node.mjs [--quick] [--out FILE]
import { spawn as cpSpawn } from "node:child_process";
import { createRequire } from "node:module";
import fs from "node:fs";

const require = createRequire(import.meta.url);
const reaper = require("../bindings/node/index.js");
const quick = process.argv.includes("--quick");
const outAt = process.argv.indexOf("--out");
const n = quick ? 20 : 300;

function once(spawn) {
  return new Promise((resolve, reject) => {
    const t = process.hrtime.bigint();
    const c = spawn("/bin/true", [], { stdio: "ignore" });
    c.on("error", reject);
    c.on("exit", () => resolve(Number(process.hrtime.bigint() - t) / 1e6));
  });
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const p90 = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length * 0.9)];
await once(reaper.spawn);
await once(cpSpawn);
const plain = [];
const contained = [];
let backend;
for (let i = 0; i < n; i++) {
  plain.push(await once(cpSpawn));
  contained.push(await once(reaper.spawn));
}
{
  const c = reaper.spawn("/bin/true", [], { stdio: "ignore" });
  await new Promise((r) => c.on("exit", r));
  backend = c.outcome.backend;
}
const f = (x) => x.toFixed(2);
const table = [
  `Node ${process.version}, ${n} spawns of /bin/true each, interleaved, spawn() to the \`exit\` event` +
    (quick ? " (--quick: debug build, not for quoting)" : "") + ":",
  "",
  "| spawn('/bin/true') to exit | median ms | p90 ms |",
  "|---|---:|---:|",
  `| child_process.spawn | ${f(median(plain))} | ${f(p90(plain))} |`,
  `| reaper-process spawn (${backend} backend, guardian on) | ${f(median(contained))} | ${f(p90(contained))} |`,
  `| **ratio** (medians) | **${(median(contained) / median(plain)).toFixed(1)}×** | |`,
].join("\n");
console.log(table);
if (outAt > 0) {
  const file = process.argv[outAt + 1];
  const text = fs.readFileSync(file, "utf8");
  const block = `<!-- bench-node:begin -->\n${table}\n<!-- bench-node:end -->`;
  const re = /<!-- bench-node:begin -->[\s\S]*<!-- bench-node:end -->/;
  fs.writeFileSync(file, re.test(text) ? text.replace(re, block) : `${text.trimEnd()}\n\n## Node: reaper-process\n\n${block}\n`);
}
