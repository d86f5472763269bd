package engine

import (
	"context"

	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

// Caller is who makes a request: the API key it came with. The rule of
// tenants (docs/security.md, "Tenants") is here and nowhere else: an
// admin key sees and acts on every object; a tenant key only on the
// objects it owns (Owner == its id), plus the operator's images, which
// are shared. What a key may not see answers exactly as a missing object
// does.
type Caller struct {
	// KeyID is the id of the key's record ("key_…"); "" for the
	// operator: the Unix socket, keys given with --api-key or
	// $SBX_API_KEYS, and sbxd's own work.
	KeyID string
	// Admin is true for the operator and for keys made with admin: true.
	Admin bool
}

// Operator is the caller of requests on the Unix socket and with
// configured keys, and of sbxd's own work: an admin with no key record.
var Operator = Caller{Admin: true}

type callerKey struct{}

// WithCaller returns ctx carrying c; the engine applies c's rights to
// every call made with it.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerOf returns the caller ctx carries; Operator when it carries none
// (sbxd's own work: recovery, the idle loop, the warm pool).
func CallerOf(ctx context.Context) Caller {
	if c, ok := ctx.Value(callerKey{}).(Caller); ok {
		return c
	}
	return Operator
}

// Sees reports whether c may see and act on an object whose Owner is
// owner. It fails closed: a zero Caller (no key, not admin) sees nothing,
// not the operator's objects (whose Owner is "").
func (c Caller) Sees(owner string) bool { return c.Admin || (c.KeyID != "" && owner == c.KeyID) }

// seesImage reports whether c may see and use img: its own, or the
// operator's (shared with every key).
func (c Caller) seesImage(img *store.Image) bool { return c.Sees(img.Owner) || img.Owner == "" }

// owners is the Owners filter of c's lists: nil (all) for an admin.
func (c Caller) owners() []string {
	if c.Admin {
		return nil
	}
	return []string{c.KeyID}
}

// eventOwner is the Owner recorded on an event c posts: "" for an admin,
// whose pending events any sandbox may take, else c's key.
func (c Caller) eventOwner() string {
	if c.Admin {
		return ""
	}
	return c.KeyID
}

// RequireAdmin answers ErrForbidden for a tenant key (what: the request,
// for the message); nil for an admin.
func (c Caller) RequireAdmin(what string) error {
	if !c.Admin {
		return errdefs.New(errdefs.ErrForbidden, "%s needs an admin key; this is a tenant key", what)
	}
	return nil
}

// hideSandbox turns a sandbox that ctx's caller may not see into the
// answer of a missing one (the same words the store uses).
func hideSandbox(ctx context.Context, sb *store.Sandbox, idOrName string) (*store.Sandbox, error) {
	if !CallerOf(ctx).Sees(sb.Owner) {
		return nil, errdefs.New(errdefs.ErrSandboxNotFound, "no sandbox named %q", idOrName)
	}
	return sb, nil
}
