// reaper-process/mcp: a drop-in for the MCP TypeScript SDK's StdioClientTransport (v1
// `@modelcontextprotocol/sdk/client/stdio.js`, v2 `@modelcontextprotocol/client`) that starts
// the server through reaper: closing the transport, the client's crash (an uncaught
// exception, process.exit) and its SIGKILL (the guardian) leave nothing of the server's tree.
// The SDK is not needed here: the wire format (one JSON-RPC message a line) is done here.
"use strict";
const { PassThrough } = require("node:stream");
const { spawn } = require("./index.js");

/** As the SDK's: the variables a server inherits when no env is given. */
const DEFAULT_INHERITED_ENV_VARS = ["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"];

function getDefaultEnvironment() {
  const env = {};
  for (const key of DEFAULT_INHERITED_ENV_VARS) {
    const value = process.env[key];
    if (value === undefined || value.startsWith("()")) continue;
    env[key] = value;
  }
  return env;
}

/** Newline-delimited JSON-RPC messages, as the SDK's ReadBuffer reads them. */
class ReadBuffer {
  constructor(maxBufferSize) {
    this._buffer = undefined;
    this._max = maxBufferSize;
  }
  append(chunk) {
    this._buffer = this._buffer ? Buffer.concat([this._buffer, chunk]) : chunk;
    if (this._max && this._buffer.length > this._max) {
      this._buffer = undefined;
      throw new Error(`the server's message exceeds maxBufferSize (${this._max} bytes)`);
    }
  }
  readMessage() {
    if (!this._buffer) return null;
    const i = this._buffer.indexOf("\n");
    if (i === -1) return null;
    const line = this._buffer.toString("utf8", 0, i).replace(/\r$/, "");
    this._buffer = this._buffer.subarray(i + 1);
    return JSON.parse(line);
  }
  clear() {
    this._buffer = undefined;
  }
}

class StdioClientTransport {
  /**
   * @param server { command, args, env, cwd, stderr } as the SDK's, plus reaper's options:
   *   grace (ms from SIGTERM to SIGKILL, 2000), closeTimeout (ms the server gets to exit once
   *   its stdin is closed, 2000), timeout, limits, sandbox.
   */
  constructor(server) {
    this._serverParams = server;
    this._readBuffer = new ReadBuffer(server.maxBufferSize);
    this._process = undefined;
    this._stderrStream = null;
    this.onclose = undefined;
    this.onerror = undefined;
    this.onmessage = undefined;
    if (server.stderr === "pipe" || server.stderr === "overlapped") {
      this._stderrStream = new PassThrough();
    }
  }

  async start() {
    if (this._process) {
      throw new Error(
        "StdioClientTransport already started! If using Client class, note that connect() calls start() automatically.",
      );
    }
    const p = this._serverParams;
    return new Promise((resolve, reject) => {
      const child = spawn(p.command, p.args ?? [], {
        env: { ...getDefaultEnvironment(), ...p.env },
        stdio: ["pipe", "pipe", p.stderr ?? "inherit"],
        cwd: p.cwd,
        grace: p.grace,
        timeout: p.timeout,
        limits: p.limits,
        sandbox: p.sandbox,
      });
      this._process = child;
      child.on("error", (error) => {
        reject(error);
        this.onerror?.(error);
      });
      child.on("spawn", () => resolve());
      // The tree is gone when the leader's exit is reported: its pipes close with it.
      child.on("close", () => {
        if (this._process === child) this._process = undefined;
        this.onclose?.();
      });
      child.stdin?.on("error", (error) => this.onerror?.(error));
      child.stdout?.on("data", (chunk) => {
        try {
          this._readBuffer.append(chunk);
          this.processReadBuffer();
        } catch (error) {
          this.onerror?.(error);
          this.close().catch(() => {});
        }
      });
      child.stdout?.on("error", (error) => this.onerror?.(error));
      if (this._stderrStream && child.stderr) child.stderr.pipe(this._stderrStream);
    });
  }

  /** The server's stderr, with stderr "pipe" or "overlapped" (a PassThrough at once). */
  get stderr() {
    if (this._stderrStream) return this._stderrStream;
    return this._process?.stderr ?? null;
  }

  /** The server's pid (the leader of its tree), once started. */
  get pid() {
    return this._process?.pid ?? null;
  }

  /** The server's process (a ReaperChildProcess), once started. */
  get process() {
    return this._process ?? null;
  }

  processReadBuffer() {
    for (;;) {
      try {
        const message = this._readBuffer.readMessage();
        if (message === null) break;
        this.onmessage?.(message);
      } catch (error) {
        this.onerror?.(error);
      }
    }
  }

  /**
   * Closes the server's stdin, gives the server closeTimeout ms to exit by itself (what it
   * leaves is then killed at once), else stops the whole tree (SIGTERM, the grace, SIGKILL).
   * Resolves once nothing of the tree is left.
   */
  async close() {
    const child = this._process;
    if (child) {
      this._process = undefined;
      if (child.outcome === null) {
        const exited = new Promise((resolve) => child.once("exit", resolve));
        try {
          child.stdin?.end();
        } catch {
          // ignore
        }
        let timer;
        const waited = new Promise((resolve) => {
          timer = setTimeout(resolve, this._serverParams.closeTimeout ?? 2000);
        });
        await Promise.race([exited, waited]);
        clearTimeout(timer);
        if (child.outcome === null) child.kill("SIGTERM");
        await exited;
      }
    }
    this._readBuffer.clear();
  }

  /**
   * Ends a server this transport started without a session (the v2 client's disposable
   * probe sibling, which it makes only of a transport that has this method): its whole tree
   * stopped (SIGTERM, the grace, SIGKILL), awaited.
   */
  async _dispose() {
    const child = this._process;
    this._process = undefined;
    if (child && child.outcome === null) {
      const exited = new Promise((resolve) => child.once("exit", resolve));
      try {
        child.stdin?.end();
      } catch {
        // ignore
      }
      child.kill("SIGTERM");
      await exited;
    }
    for (const s of [child?.stdout, child?.stdin, child?.stderr]) {
      try {
        s?.destroy();
      } catch {
        // ignore
      }
    }
    this._readBuffer.clear();
  }

  send(message) {
    return new Promise((resolve) => {
      if (!this._process?.stdin) throw new Error("Not connected");
      const json = JSON.stringify(message) + "\n";
      if (this._process.stdin.write(json)) resolve();
      else this._process.stdin.once("drain", resolve);
    });
  }
}

module.exports = { StdioClientTransport, getDefaultEnvironment, DEFAULT_INHERITED_ENV_VARS };
