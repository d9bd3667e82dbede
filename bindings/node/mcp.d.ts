// Types of reaper-process/mcp: the MCP SDK's StdioClientTransport, contained.
import { Stream } from "node:stream";
import type { Limits, ReaperChildProcess, StdioEntry } from "./index";

export interface StdioServerParameters {
  command: string;
  args?: string[];
  /** Added to getDefaultEnvironment(). */
  env?: Record<string, string>;
  /** The server's stderr: "inherit" (default), "pipe", "overlapped", "ignore", or a fd. */
  stderr?: StdioEntry;
  cwd?: string;
  maxBufferSize?: number;
  /** Milliseconds the server gets to exit once its stdin is closed (default 2000). */
  closeTimeout?: number;
  /** Milliseconds from SIGTERM to SIGKILL for what is left (default 2000). */
  grace?: number;
  timeout?: number;
  limits?: Limits;
  sandbox?: "on" | "pid" | boolean;
}

/** JSON-RPC messages as the SDK types them (kept loose: the SDK is optional). */
export type JSONRPCMessage = Record<string, unknown>;

export class StdioClientTransport {
  constructor(server: StdioServerParameters);
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage) => void;
  start(): Promise<void>;
  send(message: JSONRPCMessage): Promise<void>;
  /** Resolves once nothing of the server's tree is left. */
  close(): Promise<void>;
  readonly stderr: Stream | null;
  readonly pid: number | null;
  /** The server's process, once started. */
  readonly process: ReaperChildProcess | null;
}

export const DEFAULT_INHERITED_ENV_VARS: string[];
export function getDefaultEnvironment(): Record<string, string>;
