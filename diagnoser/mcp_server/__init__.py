"""The MCP server: diagnoser's triage, incident memory and runbooks as tools for an agent.

Modules: `config` (roots and store: one function reads the settings), `tools` (the four tools as
plain functions, each raising `ToolFailure` with a message the caller may see), `explain` (what
decided a verdict), `server` (the `mcp` SDK's MCPServer, stdio and streamable HTTP; `run_mcp`),
`cli` (`diagnoser mcp`). Importing this package does not import `mcp`; `server` does.
"""
