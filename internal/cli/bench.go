package cli

import "github.com/spf13/cobra"

func (a *app) benchCmd() *cobra.Command {
	return &cobra.Command{Use: "bench", Short: "Measure sbx on this machine", Hidden: true}
}
