package server

import (
	"context"
	"crypto/subtle"
	"net/http"
	"strings"
	"sync"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/engine"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

// API keys (docs/api.md "API keys and tenants"): the handlers of
// /v1/keys, the authentication of a request's key, and the requests open
// under each key record, which a revocation ends at once.

// errRevoked is the cause of the cancellation of a revoked key's requests.
var errRevoked = errdefs.New(errdefs.ErrUnauthorized, "the API key was revoked")

// keyStreams tracks the requests in progress of each key record (exec
// streams, terminals, previews and their WebSockets, long operations'
// streams), so that revoking the key ends them.
type keyStreams struct {
	mu      sync.Mutex
	open    map[string]map[*context.CancelCauseFunc]struct{}
	revoked map[string]bool
}

// track makes r's context end when c's key is revoked, and carry c for the
// engine; done forgets it. A key revoked meanwhile is errRevoked (and r
// is returned as it was).
func (s *Server) track(r *http.Request, c engine.Caller) (_ *http.Request, done func(), _ error) {
	ctx := engine.WithCaller(r.Context(), c)
	if c.KeyID == "" {
		return r.WithContext(ctx), func() {}, nil
	}
	ctx, cancel := context.WithCancelCause(ctx)
	ks := &s.streams
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if ks.revoked[c.KeyID] {
		cancel(errRevoked)
		return r, nil, errRevoked
	}
	if ks.open == nil {
		ks.open = map[string]map[*context.CancelCauseFunc]struct{}{}
	}
	m := ks.open[c.KeyID]
	if m == nil {
		m = map[*context.CancelCauseFunc]struct{}{}
		ks.open[c.KeyID] = m
	}
	m[&cancel] = struct{}{}
	return r.WithContext(ctx), func() {
		ks.mu.Lock()
		delete(m, &cancel)
		if len(ks.open[c.KeyID]) == 0 {
			delete(ks.open, c.KeyID)
		}
		ks.mu.Unlock()
		cancel(nil)
	}, nil
}

// endKey ends every request in progress of key id and refuses any that
// authenticated before the revocation but registers after it.
func (s *Server) endKey(id string) {
	ks := &s.streams
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if ks.revoked == nil {
		ks.revoked = map[string]bool{}
	}
	ks.revoked[id] = true
	for cancel := range ks.open[id] {
		(*cancel)(errRevoked)
	}
	delete(ks.open, id)
}

// openRequests counts the requests in progress under key id (tests).
func (s *Server) openRequests(id string) int {
	s.streams.mu.Lock()
	defer s.streams.mu.Unlock()
	return len(s.streams.open[id])
}

// callerOfKey returns who key is: the operator for a configured key
// (--api-key, $SBX_API_KEYS), else the live key record's caller.
//
// Errors: ErrUnauthorized (no such key, or revoked).
func (s *Server) callerOfKey(ctx context.Context, key string) (engine.Caller, error) {
	if key == "" {
		return engine.Caller{}, errdefs.New(errdefs.ErrUnauthorized, "missing or wrong API key (Authorization: Bearer <key>)")
	}
	ok := false
	for _, k := range s.cfg.APIKeys {
		if subtle.ConstantTimeCompare([]byte(k), []byte(key)) == 1 {
			ok = true
		}
	}
	if ok {
		return engine.Operator, nil
	}
	if !strings.HasPrefix(key, api.KeySecretPrefix) {
		// Not a key record's secret: no need to ask the store.
		return engine.Caller{}, errdefs.New(errdefs.ErrUnauthorized, "missing or wrong API key (Authorization: Bearer <key>)")
	}
	return s.eng.Authenticate(ctx, key)
}

// authenticate returns the caller of r's bearer key.
func (s *Server) authenticate(r *http.Request) (engine.Caller, error) {
	key, _ := requestKey(r)
	return s.callerOfKey(r.Context(), key)
}

func keyToAPI(k *store.Key) api.Key {
	out := api.Key{ID: k.ID, Name: k.Name, Labels: k.Labels, Admin: k.Admin, DailyLimitUSD: k.DailyLimitUSD,
		CreateTime: k.CreateTime.UTC()}
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	if !k.RevokeTime.IsZero() {
		t := k.RevokeTime.UTC()
		out.RevokeTime = &t
	}
	return out
}

// createKey answers POST /v1/keys: 201 with the record and, once, the
// secret.
func (s *Server) createKey(w http.ResponseWriter, r *http.Request) {
	if err := engine.CallerOf(r.Context()).RequireAdmin("creating API keys"); err != nil {
		s.writeError(w, r, err)
		return
	}
	var req api.CreateKeyRequest
	if err := decode(w, r, MaxJSONBody, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	k, secret, err := s.eng.CreateKey(r.Context(), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, api.CreatedKey{Key: keyToAPI(k), Secret: secret})
}

// listKeys answers GET /v1/keys[?revoked=1].
func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) {
	revoked := false
	switch v := r.URL.Query().Get("revoked"); v {
	case "", "0", "false":
	case "1", "true":
		revoked = true
	default:
		s.writeError(w, r, errdefs.Invalid("revoked", "%q: want 1 or 0", v))
		return
	}
	ks, err := s.eng.ListKeys(r.Context(), revoked)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := make([]api.Key, 0, len(ks))
	for _, k := range ks {
		out = append(out, keyToAPI(k))
	}
	writeJSON(w, http.StatusOK, out)
}

// getKey answers GET /v1/keys/{id}.
func (s *Server) getKey(w http.ResponseWriter, r *http.Request) {
	k, err := s.eng.GetKey(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, keyToAPI(k))
}

// deleteKey answers DELETE /v1/keys/{id}: the key is revoked, and its
// requests in progress end (after this answer, when it revokes itself).
func (s *Server) deleteKey(w http.ResponseWriter, r *http.Request) {
	k, err := s.eng.RevokeKey(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	s.endKey(k.ID)
}
