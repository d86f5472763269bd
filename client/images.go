package client

import (
	"context"
	"io"
	"net/http"
	"net/url"

	"github.com/sbxhq/sbx/api"
)

// Images is the image collection of one client.
type Images struct{ c *Client }

// List returns every image.
func (im *Images) List(ctx context.Context) ([]api.Image, error) {
	var out []api.Image
	err := im.c.doJSON(ctx, http.MethodGet, "/v1/images", nil, nil, &out)
	return out, err
}

// Get returns one image; ErrImageNotFound if missing.
func (im *Images) Get(ctx context.Context, name string) (*api.Image, error) {
	var out api.Image
	if err := im.c.doJSON(ctx, http.MethodGet, "/v1/images/"+url.PathEscape(name), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Delete removes an image; ErrConflict while sandboxes use it.
func (im *Images) Delete(ctx context.Context, name string) error {
	return im.c.doJSON(ctx, http.MethodDelete, "/v1/images/"+url.PathEscape(name), nil, nil, nil)
}

// Build builds an image with mmdebstrap (minutes), streaming its output.
func (im *Images) Build(ctx context.Context, req api.BuildImageRequest, progress Progress) (*api.Image, error) {
	var out api.Image
	if err := im.c.long(ctx, http.MethodPost, "/v1/images/build", nil, req, "", progress, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Pull pulls an image from an OCI registry.
func (im *Images) Pull(ctx context.Context, req api.PullImageRequest, progress Progress) (*api.Image, error) {
	var out api.Image
	if err := im.c.long(ctx, http.MethodPost, "/v1/images/pull", nil, req, "", progress, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Import uploads an image archive: a docker-save archive, a tar of an OCI
// image layout, or a root filesystem tarball (gzip allowed).
func (im *Images) Import(ctx context.Context, name string, archive io.Reader, progress Progress) (*api.Image, error) {
	var out api.Image
	q := url.Values{"name": {name}}
	if err := im.c.long(ctx, http.MethodPost, "/v1/images/import", q, archive, "application/x-tar", progress, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
