package client

import (
	"context"
	"net/http"

	"github.com/sbxhq/sbx/api"
)

// Network is a sandbox's network rules, read and changed through the API
// (GET|PUT /v1/sandboxes/{name}/network). Get one with Sandbox.Network.
type Network struct {
	sb *Sandbox
}

// Network returns the handle on the sandbox's network rules.
func (sb *Sandbox) Network() *Network { return &Network{sb: sb} }

// Get returns the sandbox's rules: {internet, allow, deny, connect}.
//
// Errors: *Error with code sandbox_not_found.
func (n *Network) Get(ctx context.Context) (api.NetworkRules, error) {
	var out api.NetworkRules
	err := n.sb.c.doJSON(ctx, http.MethodGet, sbPath(n.sb.ID, "network"), nil, nil, &out)
	return out, err
}

// Set replaces the sandbox's rules and returns them as stored. A running
// sandbox has them when Set returns (connections they forbid are cut); a
// stopped one gets them when it boots. The sandbox object's Network field
// is updated.
//
// Errors: *Error with code invalid_argument (the message names the entry,
// e.g. "network.allow[2]: ...") or sandbox_not_found.
func (n *Network) Set(ctx context.Context, rules api.NetworkRules) (api.NetworkRules, error) {
	var out api.NetworkRules
	if err := n.sb.c.doJSON(ctx, http.MethodPut, sbPath(n.sb.ID, "network"), nil, rules, &out); err != nil {
		return out, err
	}
	n.sb.Sandbox.Network = out
	return out, nil
}

// Log returns what the host refused for the sandbox (DNS names, proxied
// HTTP and TLS connections, packets), newest first, and counts of its
// decisions, since the sandbox last booted or sbxd started.
//
// Errors: *Error with code sandbox_not_found.
func (n *Network) Log(ctx context.Context) (*api.NetworkLog, error) {
	var out api.NetworkLog
	if err := n.sb.c.doJSON(ctx, http.MethodGet, sbPath(n.sb.ID, "network", "log"), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Off cuts all of the sandbox's egress: it replaces the rules with
// {"internet": false} (no allow, deny or connect entries) and returns them
// as stored. Errors: those of Set.
func (n *Network) Off(ctx context.Context) (api.NetworkRules, error) {
	return n.Set(ctx, api.NetworkRules{Internet: false})
}

// On opens the sandbox's egress to the internet: it replaces the rules
// with {"internet": true} (no allow, deny or connect entries) and returns
// them as stored. Errors: those of Set.
func (n *Network) On(ctx context.Context) (api.NetworkRules, error) {
	return n.Set(ctx, api.NetworkRules{Internet: true})
}
