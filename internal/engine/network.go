package engine

import (
	"context"
	"fmt"
	"slices"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/network"
	"github.com/sbxhq/sbx/internal/store"
)

// defaultNetwork is what a sandbox gets when the request names no rules:
// the API's default, internet on.
func defaultNetwork() api.NetworkRules {
	return api.NetworkRules{Internet: true, Allow: []string{}, Deny: []string{}, Connect: []string{}}
}

// rulesOf parses a sandbox's recorded rules. Records were validated when
// written; a record that no longer parses (an older sbxd's) gets no
// egress rather than an error.
func (e *Engine) rulesOf(sb *store.Sandbox) *network.Rules {
	r, err := network.ParseRules(sb.Network)
	if err != nil {
		e.log.Warn("network rules of the record do not parse; no egress", "sandbox", sb.Name, "err", err)
		return &network.Rules{}
	}
	return r
}

// attachNetwork takes over the network of a running sandbox after sbxd
// restarted.
func (e *Engine) attachNetwork(sb *store.Sandbox) error {
	return e.net.Attach(sb.ID, sb.Name, e.rulesOf(sb))
}

// validateNetwork checks rules given in a request: the forms of the
// entries (network.ParseRules) and that every connect entry names an
// existing sandbox other than self. Nil rules are fine (the default).
//
// Errors: ErrInvalidArgument naming the entry ("network.connect[0]: ...").
func (e *Engine) validateNetwork(ctx context.Context, n *api.NetworkRules, self string) error {
	if n == nil {
		return nil
	}
	if _, err := network.ParseRules(*n); err != nil {
		return err
	}
	for i, c := range n.Connect {
		field := fmt.Sprintf("network.connect[%d]", i)
		if c == self {
			return errdefs.Invalid(field, "%q is this sandbox itself", c)
		}
		if err := ValidateName(field, c); err != nil {
			return err
		}
		if slices.Index(n.Connect, c) != i {
			return errdefs.Invalid(field, "%q is listed twice", c)
		}
		if _, err := e.st.GetSandbox(ctx, c); err != nil {
			return errdefs.Invalid(field, "no sandbox named %q", c)
		}
	}
	return nil
}

// GetNetwork returns a sandbox's rules.
//
// Errors: ErrSandboxNotFound.
func (e *Engine) GetNetwork(ctx context.Context, idOrName string) (api.NetworkRules, error) {
	sb, err := e.Get(ctx, idOrName)
	if err != nil {
		return api.NetworkRules{}, err
	}
	return normalizeNetwork(sb.Network), nil
}

// SetNetwork replaces a sandbox's rules. A running sandbox has them within
// the call (the firewall, the DNS server and the proxy), and its
// connections the new rules forbid are cut; a stopped one gets them when
// it boots. It waits for an operation in progress on the sandbox.
//
// Errors: ErrSandboxNotFound; ErrInvalidArgument naming the entry.
func (e *Engine) SetNetwork(ctx context.Context, idOrName string, rules api.NetworkRules) (api.NetworkRules, error) {
	sb, err := e.Get(ctx, idOrName)
	if err != nil {
		return api.NetworkRules{}, err
	}
	rules = normalizeNetwork(rules)
	if err := e.validateNetwork(ctx, &rules, sb.Name); err != nil {
		return api.NetworkRules{}, err
	}
	parsed, _ := network.ParseRules(rules)
	unlock, err := e.waitLock(ctx, sb.ID, "network")
	if err != nil {
		return api.NetworkRules{}, err
	}
	defer unlock()
	if sb, err = e.Get(ctx, sb.ID); err != nil {
		return api.NetworkRules{}, err
	}
	sb.Network = rules
	if err := e.st.UpdateSandbox(context.WithoutCancel(ctx), sb); err != nil {
		return api.NetworkRules{}, err
	}
	if err := e.net.Update(sb.ID, parsed); err != nil {
		return api.NetworkRules{}, fmt.Errorf("apply network rules to %s: %w", sb.Name, err)
	}
	return rules, nil
}

// NetworkLog returns what the host refused for a sandbox, and counts,
// since its network was last set up (its boot, or sbxd's start). A sandbox
// that is not running has an empty log.
//
// Errors: ErrSandboxNotFound.
func (e *Engine) NetworkLog(ctx context.Context, idOrName string) (api.NetworkLog, error) {
	sb, err := e.Get(ctx, idOrName)
	if err != nil {
		return api.NetworkLog{}, err
	}
	return e.net.Log(sb.ID)
}
