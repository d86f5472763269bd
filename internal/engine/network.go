package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/network"
	"github.com/sbxhq/sbx/internal/store"
)

// Network is what the engine asks of the sandboxes' networks: a namespace
// per running sandbox and the rules it enforces. *network.Manager is the
// one sbxd uses; its methods document the errors. The engine's unit tests
// use a fake that makes no namespace (the fake runtime ignores
// runtime.Spec.NetNS).
type Network interface {
	// ResolvConf is the /etc/resolv.conf every sandbox gets.
	ResolvConf() string
	// Start enforces the rules of the attached sandboxes and removes
	// what no attached sandbox owns; Create works only after it.
	Start() error
	// Create makes sandbox id's network and returns its namespace path.
	Create(id, name string, rules *network.Rules) (string, error)
	// Attach takes over the network of a sandbox that runs already.
	Attach(id, name string, rules *network.Rules) error
	// Update replaces a running sandbox's rules.
	Update(id string, rules *network.Rules) error
	// Rename tells the network a sandbox's new name.
	Rename(id, name string)
	// Delete removes sandbox id's network; a missing one is fine.
	Delete(id string) error
	// Check refuses rules that can never work on this host.
	Check(r *network.Rules) error
	// Log is the audit of a running sandbox's network.
	Log(id string) (api.NetworkLog, error)
}

var _ Network = (*network.Manager)(nil)

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
	r.Secrets = e.openSecrets(sb)
	return r
}

// attachNetwork takes over the network of a running sandbox after sbxd
// restarted.
func (e *Engine) attachNetwork(sb *store.Sandbox) error {
	return e.net.Attach(sb.ID, sb.Name, e.rulesOf(sb))
}

// validateNetwork checks rules given in a request and rewrites them in
// their canonical form (network.Rules.API): the forms of the entries, no
// allow entry inside the sandbox network, and every connect entry naming
// an existing sandbox other than self. Nil rules are fine (the default).
//
// Errors: ErrInvalidArgument naming the entry ("network.connect[0]: ...").
func (e *Engine) validateNetwork(ctx context.Context, n *api.NetworkRules, self string) error {
	if n == nil {
		return nil
	}
	parsed, err := network.ParseRules(*n)
	if err != nil {
		return err
	}
	if err := e.net.Check(parsed); err != nil {
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
		// Another tenant's sandbox is as missing as one that is not there.
		if _, err := e.Get(ctx, c); err != nil {
			return errdefs.Invalid(field, "no sandbox named %q", c)
		}
	}
	*n = parsed.API()
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
	if err := e.validateNetwork(ctx, &rules, sb.Name); err != nil {
		return api.NetworkRules{}, err
	}
	sb, unlock, err := e.lockFound(ctx, sb, "network", lockOrWait)
	if err != nil {
		return api.NetworkRules{}, err
	}
	defer unlock()
	sb.Network = rules
	if err := e.st.UpdateSandbox(context.WithoutCancel(ctx), sb); err != nil {
		return api.NetworkRules{}, err
	}
	// rulesOf: the rules given, and the sandbox's secrets.
	if err := e.net.Update(sb.ID, e.rulesOf(sb)); err != nil {
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

// dropConnectTo removes a deleted sandbox's name from the connect rules of
// the others, so that a later sandbox of that name is not reachable by
// rules written for the one deleted.
func (e *Engine) dropConnectTo(ctx context.Context, name string) {
	sbs, err := e.localSandboxes(ctx, storeAll)
	if err != nil {
		return
	}
	for _, x := range sbs {
		if !slices.Contains(x.Network.Connect, name) {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, time.Minute)
		unlock, err := e.lockID(lctx, x.ID, x.Name, "network", lockOrWait)
		cancel()
		if err != nil {
			e.log.Warn("connect rules of a deleted sandbox stay", "sandbox", x.Name, "target", name, "err", err)
			continue
		}
		if cur, err := e.getLocked(ctx, x.ID); err == nil {
			cur.Network.Connect = slices.DeleteFunc(slices.Clone(cur.Network.Connect), func(n string) bool { return n == name })
			if err := e.st.UpdateSandbox(ctx, cur); err == nil {
				_ = e.net.Update(cur.ID, e.rulesOf(cur))
			}
		}
		unlock()
	}
}
