//! `reaper mcp`: a stdio MCP server with the tools `codex` and `codex-reply`, a drop-in for
//! `codex-cli-mcp-slim` 0.1.x (and the removed `codex mcp-server`), every call contained.
//!
//! | module     | concern                                                              |
//! |------------|----------------------------------------------------------------------|
//! | `params`   | tool arguments, checked from raw JSON, the contract's messages       |
//! | `argv`     | codex's argv; the server's own flags and the once-only ones          |
//! | `stream`   | the `codex exec --json` event stream, folded as it arrives, bounded  |
//! | `result`   | result text, `isError`, `structuredContent`                          |
//! | `call`     | one call through [`reaper::run::Run`]: spawn, stream, timeout, cancel |
//! | `progress` | `notifications/progress` that never hold a call up                  |
//! | `server`   | the rmcp handler: tools/list, tools/call, tasks/*, resources, slots   |
//! | `tasks`    | calls run as tasks: ids, live status, cancel, results kept, bounded  |
//! | `calls`    | the resource `reaper://calls`: the running calls, as `reaper ps`     |
//! | `gate`     | back-pressure: stop reading stdin while too much is in flight        |
//! | `py`       | the Python text forms the contract's messages use                    |

pub mod argv;
pub mod call;
pub mod calls;
pub mod gate;
pub mod params;
pub mod progress;
pub mod py;
pub mod result;
pub mod server;
pub mod stream;
pub mod tasks;
