package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/sbxhq/sbx/api"
)

// Nodes lists the nodes of the cluster the server belongs to, by name
// (GET /v1/nodes, an admin key's call); a single sbxd lists itself alone.
// Errors: *Error with code forbidden for a tenant key.
func (c *Client) Nodes(ctx context.Context) ([]api.Node, error) {
	var out []api.Node
	if err := c.doJSON(ctx, http.MethodGet, "/v1/nodes", nil, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// DrainNode makes node name drain (drain): it takes no new sandboxes and
// moves those it runs to other nodes, with their processes; with drain
// false it takes sandboxes again (POST or DELETE /v1/nodes/{name}/drain,
// an admin key's call). It returns the node's record. Errors: *Error with
// code forbidden (a tenant key), not_found (no such node),
// invalid_argument (a single sbxd).
func (c *Client) DrainNode(ctx context.Context, name string, drain bool) (*api.Node, error) {
	method := http.MethodPost
	if !drain {
		method = http.MethodDelete
	}
	var out api.Node
	if err := c.doJSON(ctx, method, "/v1/nodes/"+url.PathEscape(name)+"/drain", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RemoveNode deletes the record of node name, a node that will not come
// back, with its journal entries (DELETE /v1/nodes/{name}, an admin key's
// call). Errors: *Error with code forbidden, not_found, invalid_argument
// (a single sbxd), conflict (the node is live, or sandboxes still name
// it; the message says which).
func (c *Client) RemoveNode(ctx context.Context, name string) error {
	return c.doJSON(ctx, http.MethodDelete, "/v1/nodes/"+url.PathEscape(name), nil, nil, nil)
}
