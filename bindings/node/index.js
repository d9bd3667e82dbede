// reaper-process: `spawn` and `run` shaped like `child_process`, where the timeout, `kill()`,
// the handle's garbage collection and this process's end stop the command's whole tree (the
// Rust library `reaper`: a cgroup of the run's own, pidfds; see docs/node.md).
"use strict";
const { EventEmitter } = require("node:events");
const net = require("node:net");
const os = require("node:os");
const path = require("node:path");
const { native } = require("./native.js");

const SIGNALS = os.constants.signals;
const SIGNAL_NAMES = Object.fromEntries(Object.entries(SIGNALS).map(([k, v]) => [v, k]));

// Stdio as the addon takes it, per fd 0..2.
const PIPE = -1;
const INHERIT = -2;
const IGNORE = -3;

let guardianTried = false;

// The guardian covers every run of this process if Node is SIGKILLed: started once, at the
// first spawn, as a Node process of its own (guardian.js); told `done` when Node exits.
function startGuardian() {
  if (guardianTried) return;
  guardianTried = true;
  if (process.env.REAPER_NODE_GUARDIAN === "0") return;
  try {
    native.guardianStart(process.execPath, [path.join(__dirname, "guardian.js")]);
    process.on("exit", () => native.guardianDone());
  } catch (e) {
    process.emitWarning(
      `reaper-process: no guardian (${e.message}): if Node is killed, its runs' trees are not`,
    );
  }
}

/** The guardian's pid, once the first spawn started it (null without one). */
function guardianPid() {
  return native.guardianPid() ?? null;
}

function signalNumber(sig, what) {
  if (typeof sig === "number") {
    if (SIGNAL_NAMES[sig] === undefined && sig !== 0) throw new TypeError(`${what}: unknown signal ${sig}`);
    return sig;
  }
  const n = SIGNALS[String(sig).toUpperCase()];
  if (n === undefined) {
    const e = new TypeError(`${what}: unknown signal: ${sig}`);
    e.code = "ERR_UNKNOWN_SIGNAL";
    throw e;
  }
  return n;
}

function stdioEntry(v, i) {
  if (v === undefined || v === null || v === "pipe" || v === "overlapped") return PIPE;
  if (v === "inherit") return INHERIT;
  if (v === "ignore") return IGNORE;
  if (typeof v === "number" && Number.isInteger(v) && v >= 0) return v;
  if (typeof v === "object" && typeof v.fd === "number") return v.fd;
  if (typeof v === "object" && v._handle && typeof v._handle.fd === "number" && v._handle.fd >= 0) {
    return v._handle.fd;
  }
  throw new TypeError(`stdio[${i}]: ${String(v)} is not supported (pipe, inherit, ignore, a fd)`);
}

function stdioOf(stdio) {
  if (stdio === undefined || typeof stdio === "string") {
    const one = stdioEntry(stdio, 0);
    return [one, one, one];
  }
  if (!Array.isArray(stdio)) throw new TypeError("options.stdio must be a string or an array");
  const three = [0, 1, 2].map((i) => stdioEntry(stdio[i], i));
  for (let i = 3; i < stdio.length; i++) {
    if (stdio[i] !== "ignore" && stdio[i] != null) {
      throw new TypeError(`stdio[${i}]: only fds 0, 1 and 2 are supported`);
    }
  }
  return three;
}

function msOf(v, what) {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "number" || !(v >= 0) || !Number.isFinite(v)) {
    throw new RangeError(`options.${what} must be a finite number of milliseconds >= 0`);
  }
  return v;
}

/**
 * A running command and its whole tree, shaped like `child_process.ChildProcess`.
 */
class ReaperChildProcess extends EventEmitter {
  constructor() {
    super();
    this.pid = undefined;
    this.stdin = null;
    this.stdout = null;
    this.stderr = null;
    this.stdio = [null, null, null];
    this.exitCode = null;
    this.signalCode = null;
    this.killed = false;
    this.connected = false;
    this.spawnfile = undefined;
    this.spawnargs = [];
    /** How the run ended (reaper's Outcome), once it has. */
    this.outcome = null;
    /** The containment the run got: "cgroup", "subreaper" or "pgid". */
    this.backend = undefined;
    /** Why the containment is weaker than a cgroup of the run's own, when it is. */
    this.warning = null;
    this._native = null;
    this._killSignal = SIGNALS.SIGTERM;
    this._exited = false;
    this._closed = false;
    this._open = 0;
    this._ref = true;
  }

  /**
   * Ends the whole tree: "SIGKILL" kills every process now; any other signal (SIGTERM by
   * default) goes to every process of the tree, which then gets the grace before SIGKILL.
   * Returns true when the request was made (false once the run is over).
   */
  kill(sig) {
    const n = signalNumber(sig === undefined ? "SIGTERM" : sig, "kill");
    if (!this._native || this._exited) return false;
    if (n === 0) return true;
    const sent = this._native.kill(n);
    if (sent) this.killed = true;
    return sent;
  }

  /** Keeps Node's event loop alive until the run is over (the default). */
  ref() {
    this._ref = true;
    if (this._native && !this._exited) {
      live.add(this);
      this._native.setRef(true);
    }
  }

  /**
   * Lets Node exit while the run goes on (its end then ends the tree), and lets the handle be
   * garbage-collected once nothing else holds it: that kills the tree.
   */
  unref() {
    this._ref = false;
    live.delete(this);
    if (this._native) this._native.setRef(false);
  }

  _onOutcome(outcome) {
    this._exited = true;
    live.delete(this);
    this.outcome = outcome;
    this.exitCode = outcome.exitCode;
    this.signalCode = outcome.signalNumber == null ? null : SIGNAL_NAMES[outcome.signalNumber];
    if (this.exitCode === null && this.signalCode === null && outcome.stopReason !== "exited") {
      // Not reaped by reaper's wait (never the case on Linux): say it was killed.
      this.signalCode = "SIGKILL";
    }
    if (this.stdin) this.stdin.destroy();
    // As child_process does: streams nobody reads are drained, so that `close` comes.
    for (const s of [this.stdout, this.stderr]) {
      if (s && !s.readableFlowing && s.listenerCount("data") === 0 && s.listenerCount("readable") === 0) {
        s.resume();
      }
    }
    this.emit("exit", this.exitCode, this.signalCode);
    this._maybeClose();
  }

  _maybeClose() {
    if (this._exited && this._open === 0 && !this._closed) {
      this._closed = true;
      this.emit("close", this.exitCode, this.signalCode);
    }
  }
}

// Children that keep the event loop alive are held here, so that they are not collected.
const live = new Set();

function spawnError(e, file, args) {
  let info;
  try {
    info = JSON.parse(e.message);
  } catch {
    return e;
  }
  const err = new Error(
    info.code.startsWith("E") && !info.code.startsWith("ERR_")
      ? `spawn ${file} ${info.code}`
      : `spawn ${file}: ${info.message}`,
  );
  err.code = info.code;
  if (info.errno != null) err.errno = -info.errno;
  err.syscall = `spawn ${file}`;
  err.path = file;
  err.spawnargs = args;
  err.reaperKind = info.kind;
  err.reaperMessage = info.message;
  err.exitCode = info.exitCode;
  return err;
}

/**
 * Starts `command` with `args` in a containment of its own, like `child_process.spawn`.
 * Options: cwd, env, stdio, timeout, killSignal, shell, and reaper's own: grace (ms between
 * the first signal and SIGKILL, 2000 by default), limits ({ memoryMax, pidsMax, cpus }),
 * sandbox ("on" | "pid"), guardian (default true).
 */
function spawn(command, args, options) {
  if (!Array.isArray(args)) {
    if (args !== undefined && args !== null && typeof args === "object") options = args;
    args = [];
  }
  options = options || {};
  if (typeof command !== "string" || command.length === 0) {
    throw new TypeError("The \"command\" argument must be a non-empty string");
  }
  for (const k of ["detached", "uid", "gid"]) {
    if (options[k] !== undefined && options[k] !== false) {
      throw new TypeError(`options.${k} is not supported by reaper-process`);
    }
  }
  let file = command;
  let argv = args.map(String);
  if (options.shell) {
    const shell = typeof options.shell === "string" ? options.shell : "/bin/sh";
    argv = ["-c", [command, ...argv].join(" ")];
    file = shell;
  }
  let env;
  if (options.env) {
    env = [];
    for (const [k, v] of Object.entries(options.env)) if (v !== undefined) env.push(`${k}=${v}`);
  }
  const stdio = stdioOf(options.stdio);
  const killSignal = signalNumber(options.killSignal ?? "SIGTERM", "killSignal");
  const limits = options.limits || {};
  const child = new ReaperChildProcess();
  child.spawnfile = file;
  child.spawnargs = [file, ...argv];
  child._killSignal = killSignal;
  if (options.signal !== undefined && !(options.signal instanceof AbortSignal)) {
    throw new TypeError("options.signal must be an AbortSignal");
  }
  if (options.guardian !== false) startGuardian();
  let n;
  try {
    n = native.spawn({
      file,
      args: argv,
      cwd: options.cwd === undefined ? undefined : String(options.cwd instanceof URL ? options.cwd.pathname : options.cwd),
      env,
      stdio,
      timeoutMs: msOf(options.timeout, "timeout") || undefined,
      graceMs: msOf(options.grace, "grace"),
      killSignal,
      memoryMax: limits.memoryMax,
      pidsMax: limits.pidsMax,
      cpus: limits.cpus,
      sandbox: options.sandbox === true ? "on" : options.sandbox || undefined,
      guardian: options.guardian !== false,
      foreground: options.foreground === true,
    });
  } catch (e) {
    const err = spawnError(e, file, child.spawnargs);
    process.nextTick(() => {
      child._exited = true;
      child.emit("error", err);
      child._closed = true;
      child.emit("close", typeof err.errno === "number" ? err.errno : -1, null);
    });
    return child;
  }
  child._native = n;
  child.pid = n.pid;
  child.backend = n.backend;
  child.warning = n.warning ?? null;
  const fds = n.takePipes();
  fds.forEach((fd, i) => {
    if (fd < 0) return;
    const s = new net.Socket({ fd, readable: i !== 0, writable: i === 0 });
    child._open++;
    s.on("close", weakly(child, streamClosed));
    child.stdio[i] = s;
  });
  [child.stdin, child.stdout, child.stderr] = child.stdio;
  n.wait(weakly(child, ended));
  live.add(child);
  process.nextTick(weakly(child, spawned));
  if (options.signal) abortWith(child, options.signal);
  return child;
}

// What the addon and the streams call back must not keep an unreferenced handle from collection:
// each callback holds the child weakly, and is made outside `spawn` (a closure made there would
// share its scope, and so `child`, with the others).
// As child_process: an aborted signal stops the tree (killSignal) and emits an AbortError.
function abortWith(child, signal) {
  const onAbort = weakly(child, (c) => {
    if (c._exited) return;
    c.kill(c._killSignal);
    const err = new Error("The operation was aborted", { cause: signal.reason });
    err.name = "AbortError";
    err.code = "ABORT_ERR";
    c.emit("error", err);
  });
  if (signal.aborted) process.nextTick(onAbort);
  else {
    signal.addEventListener("abort", onAbort, { once: true });
    child.once("exit", () => signal.removeEventListener("abort", onAbort));
  }
}

function streamClosed(c) {
  c._open--;
  c._maybeClose();
}
function ended(c, json) {
  c._onOutcome(JSON.parse(json));
}
function spawned(c) {
  c.emit("spawn");
}
function weakly(child, f) {
  const weak = new WeakRef(child);
  return (...args) => {
    const c = weak.deref();
    if (c) f(c, ...args);
  };
}

/**
 * Runs `command` to its end and resolves with its outcome and output: { outcome, exitCode,
 * signal, stdout, stderr } (Buffers, or strings with options.encoding). options.input is
 * written to its stdin. Rejects only when it could not start.
 */
function run(command, args, options) {
  if (!Array.isArray(args)) {
    if (args !== undefined && args !== null && typeof args === "object") options = args;
    args = [];
  }
  options = { ...(options || {}) };
  const input = options.input;
  const encoding = options.encoding && options.encoding !== "buffer" ? options.encoding : null;
  delete options.input;
  delete options.encoding;
  if (options.stdio === undefined) options.stdio = [input === undefined ? "ignore" : "pipe", "pipe", "pipe"];
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, options);
    const out = [];
    const err = [];
    child.stdout?.on("data", (b) => out.push(b));
    child.stderr?.on("data", (b) => err.push(b));
    child.on("error", reject);
    if (child.stdin) {
      child.stdin.on("error", () => {});
      child.stdin.end(input);
    }
    child.on("close", () => {
      if (!child.outcome) return;
      const o = Buffer.concat(out);
      const e = Buffer.concat(err);
      resolve({
        pid: child.pid,
        outcome: child.outcome,
        exitCode: child.exitCode,
        signal: child.signalCode,
        stdout: encoding ? o.toString(encoding) : o,
        stderr: encoding ? e.toString(encoding) : e,
      });
    });
  });
}

module.exports = { spawn, run, guardianPid, ReaperChildProcess };
