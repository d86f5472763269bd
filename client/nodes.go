package client

import (
	"context"
	"net/http"

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
