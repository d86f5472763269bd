package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/sbxhq/sbx/api"
)

// Keys is the API key collection of one client (docs/api.md "API keys and
// tenants"). Making and revoking keys needs an admin key (the Unix socket,
// a key given to sbxd with --api-key, or a key made with Admin: true);
// with a tenant key they fail with ErrForbidden.
type Keys struct{ c *Client }

// Create makes an API key and returns its record and secret (Secret,
// "sbxk_…"), which sbxd shows this once. Errors: ErrForbidden,
// ErrInvalidArgument (naming the field), ErrNameTaken.
func (k *Keys) Create(ctx context.Context, req api.CreateKeyRequest) (*api.CreatedKey, error) {
	var out api.CreatedKey
	if err := k.c.doJSON(ctx, http.MethodPost, "/v1/keys", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// List returns the live keys, oldest first, and with revoked the revoked
// ones too. A tenant key gets its own record only.
func (k *Keys) List(ctx context.Context, revoked bool) ([]api.Key, error) {
	var q url.Values
	if revoked {
		q = url.Values{"revoked": {"1"}}
	}
	var out []api.Key
	err := k.c.doJSON(ctx, http.MethodGet, "/v1/keys", q, nil, &out)
	return out, err
}

// Get returns the key with that id or (live) name. Errors: ErrKeyNotFound
// (also for another key's record, asked with a tenant key).
func (k *Keys) Get(ctx context.Context, idOrName string) (*api.Key, error) {
	var out api.Key
	if err := k.c.doJSON(ctx, http.MethodGet, "/v1/keys/"+url.PathEscape(idOrName), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Revoke revokes the live key with that id or name at once: its requests
// in progress end with ErrUnauthorized and it authenticates nothing more.
// What it made stays. Errors: ErrForbidden, ErrKeyNotFound.
func (k *Keys) Revoke(ctx context.Context, idOrName string) error {
	return k.c.doJSON(ctx, http.MethodDelete, "/v1/keys/"+url.PathEscape(idOrName), nil, nil, nil)
}
