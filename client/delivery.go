package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/sbxhq/sbx/api"
)

// Deliveries is the delivery collection of one client.
type Deliveries struct{ c *Client }

// Deliver packs req.Paths of the sandbox (booted or woken if need be)
// into a signed delivery:
// the archive in the blob store and its record appended to the node's
// chain; with req.Teardown the sandbox is deleted afterwards and the
// answer's Teardown says what that freed. Errors: ErrInvalidArgument (a
// path missing, escaping, or over the size limit: nothing is stored),
// ErrConflict (busy).
func (sb *Sandbox) Deliver(ctx context.Context, req api.DeliveryRequest) (*api.Delivery, error) {
	return sb.DeliverStream(ctx, req, nil)
}

// DeliverStream is Deliver with progress lines.
func (sb *Sandbox) DeliverStream(ctx context.Context, req api.DeliveryRequest, progress Progress) (*api.Delivery, error) {
	var out api.Delivery
	if err := sb.c.long(ctx, http.MethodPost, sbPath(sb.ID, "deliveries"), nil, req, "", progress, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// List returns the deliveries, oldest (first of the chain) first; sandbox
// ("" for all) selects those of one sandbox, by name or id.
func (d *Deliveries) List(ctx context.Context, sandbox string) ([]api.Delivery, error) {
	var q url.Values
	if sandbox != "" {
		q = url.Values{"sandbox": {sandbox}}
	}
	var out []api.Delivery
	err := d.c.doJSON(ctx, http.MethodGet, "/v1/deliveries", q, nil, &out)
	return out, err
}

// Get returns one delivery record; ErrNotFound if there is none.
func (d *Deliveries) Get(ctx context.Context, id string) (*api.Delivery, error) {
	var out api.Delivery
	if err := d.c.doJSON(ctx, http.MethodGet, "/v1/deliveries/"+url.PathEscape(id), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Archive opens the bytes of a delivery's archive (tar, zstd) and returns
// their size. The caller closes the reader; check the bytes against the
// record (sbx delivery verify) rather than trust the transfer.
func (d *Deliveries) Archive(ctx context.Context, id string) (io.ReadCloser, int64, error) {
	resp, err := d.c.request(ctx, http.MethodGet, "/v1/deliveries/"+url.PathEscape(id)+"/archive", nil, nil, "", "application/x-tar+zstd")
	if err != nil {
		return nil, 0, err
	}
	return resp.Body, resp.ContentLength, nil
}

// PublicKey returns the node's public key (PEM) that verifies delivery
// records.
func (d *Deliveries) PublicKey(ctx context.Context) ([]byte, error) {
	resp, err := d.c.request(ctx, http.MethodGet, "/v1/deliveries/key", nil, nil, "", "application/x-pem-file")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("read the delivery key: %w", err)
	}
	return b, nil
}
