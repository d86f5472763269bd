package cli

import (
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/sbxhq/sbx/mcp"
)

// mcpVersion is the version sbx mcp reports to MCP clients.
var mcpVersion = "dev"

func (a *app) mcpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve sbx's sandboxes as MCP tools over stdio (for agents that speak the Model Context Protocol)",
		Long: "Serve sbx as Model Context Protocol tools on standard input and output, for an MCP client to start\n" +
			"as a subprocess (e.g. \"command\": \"sbx\", \"args\": [\"mcp\"]). The tools act through this CLI's\n" +
			"connection to sbxd (--socket, or --url with $SBX_API_KEY): create_sandbox, exec (with undo),\n" +
			"read_file, write_file, list_files, checkpoint, list_checkpoints, diff, restore, fork, try_in_copy,\n" +
			"snapshot, go_back_to, set_network, network_log, list_sandboxes. sbxd serves the same tools at\n" +
			"/v1/mcp (streamable HTTP).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return mcp.NewServer(a.c, mcpVersion).Run(cmd.Context(), &sdk.StdioTransport{})
		},
	}
}
