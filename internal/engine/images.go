package engine

import (
	"context"
)

// RemoveImage deletes an image; it fails with ErrConflict while a sandbox
// (warm ones aside, which are discarded) still uses it.
func (e *Engine) RemoveImage(ctx context.Context, name string) error {
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
