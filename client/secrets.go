package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/sbxhq/sbx/api"
)

// Secrets is a sandbox's secrets, held by sbxd outside the sandbox
// (GET|PUT /v1/sandboxes/{name}/secrets, PUT|DELETE .../secrets/{secret}).
// The sandbox sees a placeholder in an env var named after each secret; the
// egress proxy puts the value into HTTPS requests its rules allow. Values
// are sent, never answered. Get one with Sandbox.Secrets.
type Secrets struct {
	sb *Sandbox
}

// Secrets returns the handle on the sandbox's secrets.
func (sb *Sandbox) Secrets() *Secrets { return &Secrets{sb: sb} }

// List returns the sandbox's secrets by name: placeholders, rules and
// value lengths, never values.
//
// Errors: *Error with code sandbox_not_found.
func (s *Secrets) List(ctx context.Context) ([]api.SecretInfo, error) {
	var out api.SecretList
	if err := s.sb.c.doJSON(ctx, http.MethodGet, sbPath(s.sb.ID, "secrets"), nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Secrets, nil
}

// Set replaces all of the sandbox's secrets with secrets (none removes
// them) and returns them as stored; a secret that keeps its name keeps its
// placeholder.
//
// Errors: *Error with code invalid_argument naming the field
// ("secrets[0].rules[1].host: ...") or sandbox_not_found.
func (s *Secrets) Set(ctx context.Context, secrets []api.Secret) ([]api.SecretInfo, error) {
	if secrets == nil {
		secrets = []api.Secret{}
	}
	var out api.SecretList
	if err := s.sb.c.doJSON(ctx, http.MethodPut, sbPath(s.sb.ID, "secrets"), nil, api.SetSecretsRequest{Secrets: secrets}, &out); err != nil {
		return nil, err
	}
	return out.Secrets, nil
}

// Put adds secret name, or replaces its value and rules; a nil value
// keeps the value of a secret that exists.
//
// Errors: *Error with code invalid_argument naming the field ("name",
// "value", "rules[0].host") or sandbox_not_found.
func (s *Secrets) Put(ctx context.Context, name string, value *string, rules []api.SecretRule) (*api.SecretInfo, error) {
	var out api.SecretInfo
	if err := s.sb.c.doJSON(ctx, http.MethodPut, sbPath(s.sb.ID, "secrets", url.PathEscape(name)), nil, api.PutSecretRequest{Value: value, Rules: rules}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Delete removes secret name.
//
// Errors: *Error with code sandbox_not_found, or not_found when the
// sandbox has no secret of that name.
func (s *Secrets) Delete(ctx context.Context, name string) error {
	return s.sb.c.doJSON(ctx, http.MethodDelete, sbPath(s.sb.ID, "secrets", url.PathEscape(name)), nil, nil, nil)
}
