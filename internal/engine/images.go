package engine

import (
	"context"
	"io"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/disk"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

// ListImages returns the images ctx's caller may see: its own and the
// operator's (shared), by name; an admin sees all.
func (e *Engine) ListImages(ctx context.Context) ([]*store.Image, error) {
	all, err := e.images.List(ctx)
	if err != nil {
		return nil, err
	}
	c := CallerOf(ctx)
	out := all[:0]
	for _, img := range all {
		if c.seesImage(img) {
			out = append(out, img)
		}
	}
	return out, nil
}

// GetImage returns image name, or ErrImageNotFound when there is none
// that ctx's caller may see.
func (e *Engine) GetImage(ctx context.Context, name string) (*store.Image, error) {
	img, err := e.images.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	if !CallerOf(ctx).seesImage(img) {
		return nil, errdefs.New(errdefs.ErrImageNotFound, "no image named %q", name)
	}
	return img, nil
}

// mayWriteImage checks that ctx's caller may make image name, replacing
// any image of that name: an admin may; a tenant may make a new name or
// replace its own image. Image names are unique per sbxd, so a name that
// another key's image (or the operator's) holds is ErrNameTaken, which
// says no more than that.
func (e *Engine) mayWriteImage(ctx context.Context, name string) error {
	c := CallerOf(ctx)
	if c.Admin {
		return nil
	}
	img, err := e.images.Get(ctx, name)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if img.Owner != c.KeyID {
		return errdefs.New(errdefs.ErrNameTaken, "the image name %q is taken", name)
	}
	return nil
}

// madeImage checks the image a build, pull or import returned: one made
// at the same time under the same name by another key (the disk layer
// makes one of them and gives both callers its result) is ErrNameTaken.
func madeImage(ctx context.Context, img *store.Image, err error) (*store.Image, error) {
	if err != nil {
		return nil, err
	}
	if c := CallerOf(ctx); !c.Admin && img.Owner != c.KeyID {
		return nil, errdefs.New(errdefs.ErrNameTaken, "the image name %q is taken", img.Name)
	}
	return img, nil
}

// imageOwner is the Owner of an image ctx's caller makes: "" (shared) for the
// operator, else its key.
func imageOwner(ctx context.Context) string { return CallerOf(ctx).KeyID }

// BuildImage builds an image with mmdebstrap (disk.Images.Build), owned by
// ctx's caller.
//
// Errors: ErrInvalidArgument; ErrNameTaken (another key's image has the
// name); the build's.
func (e *Engine) BuildImage(ctx context.Context, req api.BuildImageRequest, progress disk.Progress) (*store.Image, error) {
	name := req.Name
	if name == "" {
		name = disk.DefaultImage
	}
	if err := e.mayWriteImage(ctx, name); err != nil {
		return nil, err
	}
	img, err := e.images.Build(ctx, req, imageOwner(ctx), progress)
	return madeImage(ctx, img, err)
}

// PullImage pulls an image from an OCI registry (disk.Images.Pull), owned
// by ctx's caller. Errors as BuildImage, and the pull's.
func (e *Engine) PullImage(ctx context.Context, req api.PullImageRequest, progress disk.Progress) (*store.Image, error) {
	if err := disk.ValidateImageName(req.Name); err != nil {
		return nil, err
	}
	if err := e.mayWriteImage(ctx, req.Name); err != nil {
		return nil, err
	}
	img, err := e.images.Pull(ctx, req, imageOwner(ctx), progress)
	return madeImage(ctx, img, err)
}

// ImportImage unpacks an image archive from r (disk.Images.Import), owned
// by ctx's caller. Errors as BuildImage, and the import's.
func (e *Engine) ImportImage(ctx context.Context, name string, r io.Reader, progress disk.Progress) (*store.Image, error) {
	if err := disk.ValidateImageName(name); err != nil {
		return nil, err
	}
	if err := e.mayWriteImage(ctx, name); err != nil {
		return nil, err
	}
	img, err := e.images.Import(ctx, name, imageOwner(ctx), r, progress)
	return madeImage(ctx, img, err)
}

// RemoveImage deletes an image; it fails with ErrConflict while a sandbox
// (warm ones aside, which are discarded) still uses it. A tenant may
// remove only its own images: another key's is ErrImageNotFound, the
// operator's (shared) ErrForbidden.
func (e *Engine) RemoveImage(ctx context.Context, name string) error {
	img, err := e.GetImage(ctx, name)
	if err != nil {
		return err
	}
	if c := CallerOf(ctx); !c.Sees(img.Owner) {
		return errdefs.New(errdefs.ErrForbidden, "image %q is shared by the operator; only an admin key may remove it", name)
	}
	return e.images.Remove(ctx, name, func(id string) (bool, error) {
		sbs, err := e.st.ListSandboxes(ctx, storeAll)
		if err != nil {
			return false, err
		}
		for _, sb := range sbs {
			if sb.ImageID == id && !sb.Pooled {
				return true, nil
			}
		}
		for _, sb := range sbs {
			if sb.ImageID == id && sb.Pooled {
				e.pool.remove(sb.ID, false)
				if err := e.deleteSandbox(ctx, sb, 0); err != nil {
					return false, err
				}
			}
		}
		return false, nil
	})
}
