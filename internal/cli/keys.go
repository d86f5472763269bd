package cli

import (
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/sbxhq/sbx/api"
)

// keyCmd is `sbx key create|ls|rm`: API keys as records (docs/api.md "API
// keys and tenants").
func (a *app) keyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "key",
		Short: "Make, list and revoke API keys (tenants)",
		Long: "API keys for sbxd over TCP. A tenant key sees and acts only on what it made: its sandboxes,\n" +
			"their forks and snapshots, its images and events; anything else answers as if missing.\n" +
			"Making and revoking keys needs an admin key: the Unix socket, a key given to sbxd with\n" +
			"--api-key or $SBX_API_KEYS, or a key made with --admin.",
	}
	cmd.AddCommand(a.keyCreateCmd(), a.keyLsCmd(), a.keyRmCmd())
	return cmd
}

// limitValue is --daily-limit: US dollars, ≥ 0.
type limitValue struct{ v *float64 }

func (l *limitValue) String() string {
	if l.v == nil {
		return ""
	}
	return strconv.FormatFloat(*l.v, 'f', -1, 64)
}

func (l *limitValue) Set(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("want US dollars per day, a number ≥ 0 (e.g. 5 or 0.25)")
	}
	l.v = &f
	return nil
}

func (l *limitValue) Type() string { return "usd" }

func (a *app) keyCreateCmd() *cobra.Command {
	var labels []string
	var limit limitValue
	var admin bool
	cmd := &cobra.Command{
		Use:   "create NAME [--daily-limit USD] [--label K=V] [--admin]",
		Short: "Make an API key; its secret is printed this once",
		Long: "Make an API key and print its secret (sbxk_…) on stdout. sbxd keeps only its SHA-256:\n" +
			"store the secret now. Give it to a client as $SBX_API_KEY with $SBX_URL.",
		Example: "  sbx key create agent-7 --daily-limit 5 --label team=search\n" +
			"  SBX_URL=http://127.0.0.1:7070 SBX_API_KEY=$(sbx key create ci) sbx ls",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			req := api.CreateKeyRequest{Name: args[0], DailyLimitUSD: limit.v, Admin: admin}
			var err error
			if req.Labels, err = parseKV("label", labels); err != nil {
				return err
			}
			k, err := a.c.Keys.Create(cmd.Context(), req)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(k)
			}
			fmt.Fprintln(a.stdout, k.Secret)
			fmt.Fprintf(a.stderr, "key %s (%s): the secret above is shown this once\n", k.ID, k.Name)
			return nil
		},
	}
	cmd.Flags().Var(&limit, "daily-limit", "spending limit per UTC day in US dollars (default: none)")
	cmd.Flags().StringArrayVar(&labels, "label", nil, "label KEY=VALUE (repeatable)")
	cmd.Flags().BoolVar(&admin, "admin", false, "an admin key: sees every object and manages keys")
	a.addOutput(cmd)
	return cmd
}

func (a *app) keyLsCmd() *cobra.Command {
	var revoked bool
	cmd := &cobra.Command{
		Use:   "ls [--revoked]",
		Short: "List API keys (a tenant key sees its own)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			ks, err := a.c.Keys.List(cmd.Context(), revoked)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(ks)
			}
			var rows [][]string
			for _, k := range ks {
				kind, limit, state := "tenant", "none", "live"
				if k.Admin {
					kind = "admin"
				}
				if k.DailyLimitUSD != nil {
					limit = "$" + strconv.FormatFloat(*k.DailyLimitUSD, 'f', -1, 64)
				}
				if k.RevokeTime != nil {
					state = "revoked " + age(*k.RevokeTime) + " ago"
				}
				rows = append(rows, []string{k.ID, k.Name, kind, limit, age(k.CreateTime), state, labelString(k.Labels)})
			}
			a.table("ID\tNAME\tKIND\tDAILY LIMIT\tAGE\tSTATE\tLABELS", rows)
			return nil
		},
	}
	cmd.Flags().BoolVar(&revoked, "revoked", false, "revoked keys too")
	a.addOutput(cmd)
	return cmd
}

func (a *app) keyRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rm ID|NAME...",
		Short: "Revoke API keys at once (their open streams end; what they made stays)",
		Long: `Revoke API keys at once: their open streams end; what they made stays.
Each key is tried even after one fails (a typo or an already revoked key
never leaves the later ones live); each revoked key is printed, and the
failures are reported together at the end (exit status 1).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var errs []error
			for _, id := range args {
				if err := a.c.Keys.Revoke(cmd.Context(), id); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", id, err))
					continue
				}
				fmt.Fprintln(a.stdout, id)
			}
			return errors.Join(errs...)
		},
	}
}
