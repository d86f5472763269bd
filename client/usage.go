package client

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/sbxhq/sbx/api"
)

// UsageQuery selects what Usage reports. Zero fields take sbxd's defaults:
// since the start of the current UTC day, until now, grouped by sandbox.
type UsageQuery struct {
	Since, Until time.Time
	// GroupBy is api.UsageBySandbox, api.UsageByKey or api.UsageByDay.
	GroupBy string
}

// Usage answers GET /v1/usage: CPU seconds used, memory GiB-seconds
// allocated while running and bytes-seconds stored in [q.Since, q.Until),
// grouped, each with its cost in US dollars at sbxd's prices. Errors:
// ErrInvalidArgument (until not after since, an unknown group, a window
// over 400 days).
func (c *Client) Usage(ctx context.Context, q UsageQuery) (*api.Usage, error) {
	v := url.Values{}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339))
	}
	if !q.Until.IsZero() {
		v.Set("until", q.Until.UTC().Format(time.RFC3339))
	}
	if q.GroupBy != "" {
		v.Set("group_by", q.GroupBy)
	}
	var out api.Usage
	if err := c.doJSON(ctx, http.MethodGet, "/v1/usage", v, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SetKeyLimit answers PUT /v1/keys/{id}/limit: it replaces the daily
// spending limit of API key id (its id or name; req.DailyLimitUSD nil for
// none) and returns the key. With req.ResumeSuspended, the sandboxes the
// key's limit suspended resume once it is under its limit. Admin keys
// only. Errors: ErrInvalidArgument (a limit below zero), ErrNotFound (no
// such live key), an *Error with code forbidden (a tenant key).
func (c *Client) SetKeyLimit(ctx context.Context, id string, req api.KeyLimitRequest) (*api.Key, error) {
	var out api.Key
	if err := c.doJSON(ctx, http.MethodPut, "/v1/keys/"+url.PathEscape(id)+"/limit", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
