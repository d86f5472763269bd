package api

import "time"

// KeyNameMaxLen is the longest API key name, in bytes.
const KeyNameMaxLen = 63

// KeySecretPrefix starts every API key secret made by POST /v1/keys:
// "sbxk_" and 43 characters of unpadded base64url (32 random bytes).
const KeySecretPrefix = "sbxk_"

// CreateKeyRequest is the body of POST /v1/keys (admin keys only).
type CreateKeyRequest struct {
	// Name is required, unique among live keys:
	// [A-Za-z0-9][A-Za-z0-9._-]{0,62}, not starting with "key_".
	Name string `json:"name"`
	// DailyLimitUSD is the key's spending limit per UTC day, in US
	// dollars, ≥ 0; absent or null for no limit.
	DailyLimitUSD *float64 `json:"daily_limit_usd,omitempty"`
	// Labels are key=value pairs kept with the key.
	Labels map[string]string `json:"labels,omitempty"`
	// Admin makes an admin key (sees and acts on every object, manages
	// keys); by default a tenant key (sees only what it made).
	Admin bool `json:"admin,omitempty"`
}

// Key is an API key's record, as GET /v1/keys lists it. The secret is
// never part of it.
type Key struct {
	// ID is "key_" and 16 lowercase hex digits; objects the key makes
	// belong to it.
	ID     string            `json:"id"`
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
	Admin  bool              `json:"admin"`
	// DailyLimitUSD is the spending limit per UTC day in US dollars, or
	// null for none.
	DailyLimitUSD *float64  `json:"daily_limit_usd"`
	CreateTime    time.Time `json:"create_time"`
	// RevokeTime is when the key was revoked (revoked keys are listed
	// only with ?revoked=1).
	RevokeTime *time.Time `json:"revoke_time,omitempty"`
}

// CreatedKey is the answer of POST /v1/keys: the record and its secret,
// shown this once (sbxd keeps only its SHA-256).
type CreatedKey struct {
	Key
	// Secret is the bearer token: "sbxk_" and 43 base64url characters.
	Secret string `json:"secret"`
}
