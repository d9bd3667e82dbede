// The MCP TypeScript SDK's StdioClientTransport as a wrapper: starts the server (argv), and
// closes it the SDK's way (transport.close()) when this client's stdin reaches EOF.
const { StdioClientTransport } = require("@modelcontextprotocol/sdk/client/stdio.js");

async function main() {
  const [command, ...args] = process.argv.slice(2);
  const transport = new StdioClientTransport({ command, args, stderr: "inherit" });
  await transport.start();
  process.stdin.resume();
  process.stdin.on("end", async () => {
    await transport.close();
    process.exit(0);
  });
}

main();
