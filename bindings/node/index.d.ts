// Types of reaper-process: spawn() and run() shaped like child_process, for the whole tree.
import { EventEmitter } from "node:events";
import { Readable, Writable } from "node:stream";

export type StdioEntry = "pipe" | "overlapped" | "inherit" | "ignore" | null | undefined | number | { fd: number };

/** Caps for the whole tree (the cgroup backend; a run with limits never falls back). */
export interface Limits {
  /** memory.max, bytes. */
  memoryMax?: number;
  /** pids.max: processes and threads. */
  pidsMax?: number;
  /** cpu.max as cores (0.5: half a core). */
  cpus?: number;
}

export interface SpawnOptions {
  cwd?: string | URL;
  /** The whole environment (default: this process's). */
  env?: NodeJS.ProcessEnv;
  /** 'pipe' (default), 'inherit', 'ignore', or one entry per fd 0, 1, 2 (fds beyond 2: 'ignore' only). */
  stdio?: "pipe" | "overlapped" | "inherit" | "ignore" | StdioEntry[];
  /** Milliseconds from the spawn: then the whole tree is stopped (killSignal, grace, SIGKILL). */
  timeout?: number;
  /** The first signal of a stop by the timeout (default SIGTERM). */
  killSignal?: NodeJS.Signals | number;
  /** Run through /bin/sh -c (or this shell). */
  shell?: boolean | string;
  /** Milliseconds between a stop's first signal and SIGKILL for what is left (default 2000). */
  grace?: number;
  limits?: Limits;
  /** A sandbox the tree cannot leave: "on", or "pid" with a PID namespace (docs/sandbox.md). */
  sandbox?: "on" | "pid" | boolean;
  /** Covered by this process's guardian if Node is SIGKILLed (default true). */
  guardian?: boolean;
  /** Let the command use this process's terminal as a foreground job does (default false: it runs in a process group of its own, and a read from the terminal stops it). */
  foreground?: boolean;
  /** Aborting it stops the whole tree (killSignal, grace, SIGKILL) and emits an AbortError. */
  signal?: AbortSignal;
}

export type StopReason =
  | "exited" | "timeout" | "signal" | "cancel" | "parent-died" | "stdin-eof" | "oom" | "error"
  | "shutdown" | "stopped" | "killed";

export interface ProcessInfo {
  pid: number;
  /** Clock ticks after boot (/proc/PID/stat field 22), as a string. */
  starttime: string;
  comm: string;
}

/** How a run ended (the library's Outcome). */
export interface Outcome {
  argv: string[];
  backend: "cgroup" | "subreaper" | "pgid";
  cgroup: string | null;
  leaderPid: number;
  /** The leader's exit code, or null when a signal killed it. */
  exitCode: number | null;
  signalNumber: number | null;
  stopReason: StopReason;
  /** The signal of kill(signal), for stopReason "signal". */
  receivedSignalNumber: number | null;
  durationMs: number;
  leaderRanMs: number | null;
  teardownMs: number;
  /** Processes the stop ended. */
  killed: number;
  /** Processes alive after the teardown: always empty unless something went wrong. */
  survivors: ProcessInfo[];
  escapees: (ProcessInfo & { to: string })[];
  error: string | null;
  guardianPid: number | null;
  limits: { memoryMax: number | null; pidsMax: number | null; cpus: number | null } | null;
  /** What the cgroup counted (cgroup backend); a figure the kernel does not keep is null. */
  usage: {
    memoryPeakBytes: number | null;
    oomKill: number | null;
    oomGroupKill: number | null;
    pidsMaxEvents: number | null;
    cpuUsageUsec: number | null;
    cpuNrThrottled: number | null;
    cpuThrottledUsec: number | null;
  } | null;
  /** timeout(1)'s status for the run, the leader's status preserved. */
  exitStatus: number;
}

export class ReaperChildProcess extends EventEmitter {
  readonly pid: number | undefined;
  readonly stdin: Writable | null;
  readonly stdout: Readable | null;
  readonly stderr: Readable | null;
  readonly stdio: [Writable | null, Readable | null, Readable | null];
  readonly exitCode: number | null;
  readonly signalCode: NodeJS.Signals | null;
  readonly killed: boolean;
  readonly spawnfile: string;
  readonly spawnargs: string[];
  /** How the run ended, once `exit` was emitted. */
  readonly outcome: Outcome | null;
  /** The containment the run got. */
  readonly backend: "cgroup" | "subreaper" | "pgid" | undefined;
  /** Why the containment is weaker than a cgroup of the run's own (the library's fallback), when it is. */
  readonly warning: string | null;
  /** SIGKILL: the whole tree now. Another signal (SIGTERM by default): to every process, then the grace, then SIGKILL. */
  kill(signal?: NodeJS.Signals | number): boolean;
  ref(): void;
  /** Node may exit while it runs (its exit then ends the tree); an unreferenced handle that is collected kills the tree. */
  unref(): void;
  on(event: "spawn", listener: () => void): this;
  on(event: "exit", listener: (code: number | null, signal: NodeJS.Signals | null) => void): this;
  on(event: "close", listener: (code: number | null, signal: NodeJS.Signals | null) => void): this;
  on(event: "error", listener: (err: SpawnError) => void): this;
  on(event: string | symbol, listener: (...args: any[]) => void): this;
  once(event: "spawn", listener: () => void): this;
  once(event: "exit", listener: (code: number | null, signal: NodeJS.Signals | null) => void): this;
  once(event: "close", listener: (code: number | null, signal: NodeJS.Signals | null) => void): this;
  once(event: "error", listener: (err: SpawnError) => void): this;
  once(event: string | symbol, listener: (...args: any[]) => void): this;
}

/** A spawn that failed: `code` as child_process gives it (ENOENT, EACCES…), or ERR_REAPER_CONTAINMENT, ERR_REAPER_SANDBOX, ERR_REAPER_SPAWN. */
export interface SpawnError extends Error {
  code: string;
  errno?: number;
  syscall: string;
  path: string;
  spawnargs: string[];
  /** The library's error kind: NotFound, NotExecutable, TooLarge, Containment, Sandbox, JoinFailed, NoPidfd, Spawn. */
  reaperKind: string;
  reaperMessage: string;
  /** timeout(1)'s status for it: 127, 126 or 125. */
  exitCode: number;
}

export function spawn(command: string, args?: readonly string[], options?: SpawnOptions): ReaperChildProcess;
export function spawn(command: string, options?: SpawnOptions): ReaperChildProcess;

export interface RunOptions extends SpawnOptions {
  /** Written to the command's stdin, then closed. */
  input?: string | Buffer | Uint8Array;
  /** Output as strings in this encoding (default: Buffers). */
  encoding?: BufferEncoding | "buffer";
}

export interface RunResult<T = Buffer | string> {
  pid: number;
  outcome: Outcome;
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  stdout: T;
  stderr: T;
}

/** Runs the command to its end; rejects only when it could not start. */
export function run(command: string, args?: readonly string[], options?: RunOptions): Promise<RunResult>;
export function run(command: string, options?: RunOptions): Promise<RunResult>;

/** The guardian's pid, once the first spawn started it; null without one. */
export function guardianPid(): number | null;
