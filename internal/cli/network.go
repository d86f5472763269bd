package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// netFlags are the rule flags of create, fork and net set.
type netFlags struct {
	offline              bool
	internet             bool
	allow, deny, connect []string
}

// add registers the flags; withInternet adds --internet (net set) where
// create and fork have --offline.
func (n *netFlags) add(cmd *cobra.Command, withInternet bool) {
	f := cmd.Flags()
	if withInternet {
		f.BoolVar(&n.internet, "internet", true, "egress at all (--internet=false: none)")
	}
	f.BoolVar(&n.offline, "offline", false, "no egress at all (same as --internet=false)")
	f.StringArrayVar(&n.allow, "allow", nil, "allow only these: a domain (pypi.org, *.example.org) or IPv4 CIDR (repeatable)")
	f.StringArrayVar(&n.deny, "deny", nil, "deny a domain or IPv4 CIDR; wins over --allow (repeatable)")
	f.StringArrayVar(&n.connect, "connect", nil, "another sandbox this one may connect to (repeatable)")
}

// rules are the rules the flags give, or nil when no flag was given.
// --offline with --internet=true is an error.
func (n *netFlags) rules(cmd *cobra.Command) (*api.NetworkRules, error) {
	any := false
	for _, name := range []string{"internet", "offline", "allow", "deny", "connect"} {
		if f := cmd.Flags().Lookup(name); f != nil && f.Changed {
			any = true
		}
	}
	if !any {
		return nil, nil
	}
	internet := !n.offline
	if f := cmd.Flags().Lookup("internet"); f != nil && f.Changed {
		if n.offline && n.internet {
			return nil, fmt.Errorf("--offline and --internet=true contradict each other")
		}
		internet = internet && n.internet
	}
	return &api.NetworkRules{Internet: internet, Allow: orEmpty(n.allow), Deny: orEmpty(n.deny), Connect: orEmpty(n.connect)}, nil
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func (a *app) netCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "net",
		Short: "Show and change a sandbox's network rules, and what they refused",
	}
	cmd.AddCommand(a.netGetCmd(), a.netSetCmd(), a.netLogCmd())
	return cmd
}

func (a *app) netGetCmd() *cobra.Command {
	return sandboxReadCmd(a, &cobra.Command{
		Use:   "get NAME",
		Short: "Show a sandbox's network rules",
	},
		func(ctx context.Context, sb *client.Sandbox) (api.NetworkRules, error) { return sb.Network().Get(ctx) },
		func(sb *client.Sandbox, r api.NetworkRules) error {
			a.printRules(r)
			return nil
		})
}

func (a *app) printRules(r api.NetworkRules) {
	on := "on"
	if !r.Internet {
		on = "off"
	}
	list := func(l []string, none string) string {
		if len(l) == 0 {
			return none
		}
		out := make([]string, len(l))
		for i, s := range l {
			out[i] = clean(s)
		}
		return strings.Join(out, ", ")
	}
	allowNone := "(anything not denied)"
	if !r.Internet {
		allowNone = "- (no egress)"
	}
	fmt.Fprintf(a.stdout, "internet: %s\nallow:    %s\ndeny:     %s\nconnect:  %s\n", on,
		list(r.Allow, allowNone), list(r.Deny, "-"), list(r.Connect, "-"))
}

func (a *app) netSetCmd() *cobra.Command {
	var nf netFlags
	cmd := &cobra.Command{
		Use:   "set NAME [--internet=false] [--allow HOST|CIDR]... [--deny HOST|CIDR]... [--connect SANDBOX]...",
		Short: "Replace a sandbox's network rules (a running sandbox has them at once)",
		Long: "Replace all of a sandbox's network rules with the ones the flags give: rules not\n" +
			"given are cleared, and no flag at all means internet on, nothing else.\n" +
			"Connections the new rules forbid are cut.",
		Example: "  sbx net set dev --allow pypi.org --allow files.pythonhosted.org\n" +
			"  sbx net set dev --internet=false\n" +
			"  sbx net set dev --deny 10.0.0.0/8 --connect db",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			sb, err := a.c.Sandboxes.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			rules, err := nf.rules(cmd)
			if err != nil {
				return err
			}
			if rules == nil {
				rules = &api.NetworkRules{Internet: true, Allow: []string{}, Deny: []string{}, Connect: []string{}}
			}
			r, err := sb.Network().Set(cmd.Context(), *rules)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(r)
			}
			a.printRules(r)
			return nil
		},
	}
	nf.add(cmd, true)
	a.addOutput(cmd)
	return cmd
}

func (a *app) netLogCmd() *cobra.Command {
	return sandboxReadCmd(a, &cobra.Command{
		Use:   "log NAME",
		Short: "Show what the network rules refused (DNS names, connections, packets), newest first",
	},
		func(ctx context.Context, sb *client.Sandbox) (*api.NetworkLog, error) { return sb.Network().Log(ctx) },
		func(sb *client.Sandbox, l *api.NetworkLog) error {
			c := l.Counts
			fmt.Fprintf(a.stdout, "dns: %d answered, %d refused; connections: %d allowed, %d refused; packets refused: %d\n\n",
				c.DNSAnswered, c.DNSRefused, c.ConnectionsAllowed, c.ConnectionsRefused, c.PacketsRefused)
			var rows [][]string
			for _, e := range l.Refused {
				port := "-"
				if e.Port != 0 {
					port = fmt.Sprint(e.Port)
				}
				rows = append(rows, []string{e.Time.Local().Format("15:04:05"), e.Kind, e.Destination, port, fmt.Sprint(e.Count), e.Reason})
			}
			a.table("TIME\tKIND\tDESTINATION\tPORT\tCOUNT\tREASON", rows)
			return nil
		})
}
