package engine

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"math"
	"regexp"
	"strings"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

// MaxDailyLimitUSD is the largest daily_limit_usd a key may have, in US
// dollars.
const MaxDailyLimitUSD = 1e9

var keyNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ValidateKeyRequest checks a POST /v1/keys body; the error names the
// field (name, daily_limit_usd, labels).
func ValidateKeyRequest(req api.CreateKeyRequest) error {
	switch {
	case req.Name == "":
		return errdefs.Invalid("name", "a name is required")
	case len(req.Name) > api.KeyNameMaxLen:
		return errdefs.Invalid("name", "%d bytes, at most %d", len(req.Name), api.KeyNameMaxLen)
	case !keyNameRE.MatchString(req.Name):
		return errdefs.Invalid("name", "%q must be characters of A-Z a-z 0-9 . _ -, starting with a letter or digit", req.Name)
	case strings.HasPrefix(req.Name, "key_"):
		return errdefs.Invalid("name", "%q starts with key_, which names key ids", req.Name)
	}
	if err := validateDailyLimit(req.DailyLimitUSD); err != nil {
		return err
	}
	return validateLabels(req.Labels)
}

// validateDailyLimit checks a key's daily spending limit in USD (nil:
// none): ErrInvalidArgument naming daily_limit_usd when it is NaN, below 0
// or above MaxDailyLimitUSD.
func validateDailyLimit(l *float64) error {
	if l != nil && (math.IsNaN(*l) || *l < 0 || *l > MaxDailyLimitUSD) {
		return errdefs.Invalid("daily_limit_usd", "%g is out of range [0, %g]", *l, float64(MaxDailyLimitUSD))
	}
	return nil
}

// HashKey returns what sbxd stores of an API key secret: the lowercase hex
// SHA-256 of its bytes. A secret is 32 random bytes, so a plain hash (no
// salt, no stretching) cannot be searched.
func HashKey(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

func newKeyID() string { return "key_" + newID()[4:] }

func newKeySecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return api.KeySecretPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// CreateKey makes an API key and returns its record and its secret, which
// sbxd does not keep (only HashKey of it). Only an admin may.
//
// Errors: ErrForbidden (a tenant key), ErrInvalidArgument (the message
// names the field), ErrNameTaken (a live key has the name).
func (e *Engine) CreateKey(ctx context.Context, req api.CreateKeyRequest) (*store.Key, string, error) {
	if err := CallerOf(ctx).RequireAdmin("creating API keys"); err != nil {
		return nil, "", err
	}
	if err := ValidateKeyRequest(req); err != nil {
		return nil, "", err
	}
	secret := newKeySecret()
	k := &store.Key{ID: newKeyID(), Name: req.Name, Hash: HashKey(secret), Labels: req.Labels, Admin: req.Admin,
		DailyLimitUSD: req.DailyLimitUSD, CreateTime: time.Now().UTC()}
	if err := e.st.CreateKey(ctx, k); err != nil {
		return nil, "", err
	}
	e.log.Info("API key created", "key", k.ID, "name", k.Name, "admin", k.Admin)
	return k, secret, nil
}

// ListKeys returns the live API keys (with revoked, the revoked ones too),
// oldest first. A tenant key sees only its own record.
func (e *Engine) ListKeys(ctx context.Context, revoked bool) ([]*store.Key, error) {
	c := CallerOf(ctx)
	if !c.Admin {
		k, err := e.st.GetKey(ctx, c.KeyID)
		if err != nil {
			return nil, err
		}
		return []*store.Key{k}, nil
	}
	return e.st.ListKeys(ctx, revoked)
}

// GetKey returns the key with that id or (live) name. A tenant key may
// read only its own record.
//
// Errors: ErrKeyNotFound (none, or another key's for a tenant).
func (e *Engine) GetKey(ctx context.Context, idOrName string) (*store.Key, error) {
	k, err := e.st.GetKey(ctx, idOrName)
	if err != nil {
		return nil, err
	}
	if c := CallerOf(ctx); !c.Admin && k.ID != c.KeyID {
		return nil, errdefs.New(errdefs.ErrKeyNotFound, "no API key %q", idOrName)
	}
	return k, nil
}

// RevokeKey revokes the live key with that id or name, at once: from now
// on it authenticates nothing. Only an admin may; the server ends the
// key's open streams. The record stays (listed with revoked), and so do
// the objects the key owns.
//
// Errors: ErrForbidden (a tenant key), ErrKeyNotFound (no live key).
func (e *Engine) RevokeKey(ctx context.Context, idOrName string) (*store.Key, error) {
	if err := CallerOf(ctx).RequireAdmin("revoking API keys"); err != nil {
		return nil, err
	}
	k, err := e.st.GetKey(ctx, idOrName)
	if err != nil {
		return nil, err
	}
	if !k.RevokeTime.IsZero() {
		return nil, errdefs.New(errdefs.ErrKeyNotFound, "API key %q is already revoked", idOrName)
	}
	now := time.Now().UTC()
	if err := e.st.RevokeKey(context.WithoutCancel(ctx), k.ID, now); err != nil {
		return nil, err
	}
	k.RevokeTime = now
	e.log.Info("API key revoked", "key", k.ID, "name", k.Name)
	return k, nil
}

// Authenticate returns the caller whose key record has secret: a live
// key's id and admin flag.
//
// Errors: ErrUnauthorized (no such key, or revoked); the store's.
func (e *Engine) Authenticate(ctx context.Context, secret string) (Caller, error) {
	k, err := e.st.KeyByHash(ctx, HashKey(secret))
	if errdefs.IsNotFound(err) {
		return Caller{}, errdefs.New(errdefs.ErrUnauthorized, "missing or wrong API key (Authorization: Bearer <key>)")
	}
	if err != nil {
		return Caller{}, err
	}
	if !k.RevokeTime.IsZero() {
		return Caller{}, errdefs.New(errdefs.ErrUnauthorized, "this API key was revoked")
	}
	return Caller{KeyID: k.ID, Admin: k.Admin}, nil
}
