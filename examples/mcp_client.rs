//! An MCP client that starts its stdio server contained: when the client is done — or crashes,
//! or is killed with the guardian on — the server and everything it started are gone, instead
//! of running forever as a forgotten stdio server does.
//!
//! ```text
//! cargo run --example mcp_client -- reaper mcp
//! cargo run --example mcp_client -- npx -y @modelcontextprotocol/server-everything
//! ```
//!
//! lists the server's tools, then drops the [`reaper::Child`]: one SIGKILL for the server's
//! whole tree, its cgroup removed.

use std::process::ExitCode;
use std::time::Duration;

use reaper::{Command, Stdio};
use rmcp::ServiceExt;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some((program, args)) = argv.split_first() else {
        eprintln!("usage: mcp_client SERVER [ARG]...");
        return ExitCode::from(2);
    };
    let mut server = match Command::new(program)
        .args(args)
        .stdin(Stdio::Piped)
        .stdout(Stdio::Piped)
        .spawn()
        .await
    {
        Ok(server) => server,
        Err(e) => {
            eprintln!("mcp_client: {e}");
            return ExitCode::from(e.exit_code());
        }
    };
    let (Some(stdin), Some(stdout)) = (server.stdin.take(), server.stdout.take()) else {
        eprintln!("mcp_client: the server's pipes are missing");
        return ExitCode::FAILURE;
    };

    let session = tokio::time::timeout(Duration::from_secs(60), ().serve((stdout, stdin))).await;
    let client = match session {
        Ok(Ok(client)) => client,
        Ok(Err(e)) => {
            eprintln!("mcp_client: initialize failed: {e}");
            return ExitCode::FAILURE;
        }
        Err(_) => {
            eprintln!("mcp_client: no answer to initialize within 60 s");
            return ExitCode::FAILURE;
        }
    };
    if let Some(info) = client.peer_info().and_then(|i| i.server_info.clone()) {
        println!("server: {} {}", info.name, info.version);
    }
    match client.list_all_tools().await {
        Ok(tools) => {
            for tool in tools {
                println!("tool: {}", tool.name);
            }
        }
        Err(e) => eprintln!("mcp_client: tools/list failed: {e}"),
    }

    let tree: Vec<String> = server
        .members()
        .iter()
        .map(|p| format!("{} (pid {})", p.comm, p.pid))
        .collect();
    println!("the server's tree: {}", tree.join(", "));
    // Dropping the client closes the server's stdin; dropping `server` kills whatever is left
    // of its tree at once, whether or not the server honours the EOF.
    drop(client);
    drop(server);
    println!("server stopped with its whole tree");
    ExitCode::SUCCESS
}
