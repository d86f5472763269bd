package server

import (
	"net/http"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/engine"
	"github.com/sbxhq/sbx/internal/errdefs"
)

// MaxUsageWindow is the longest span one GET /v1/usage may cover.
const MaxUsageWindow = 400 * 24 * time.Hour

// usage answers GET /v1/usage?since=&until=&group_by=: since defaults to
// the start of the current UTC day, until to now, group_by to sandbox.
func (s *Server) usage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	now := time.Now().UTC()
	uq := engine.UsageQuery{Since: now.Truncate(24 * time.Hour), Until: now, GroupBy: q.Get("group_by")}
	for _, p := range []struct {
		name string
		t    *time.Time
	}{{"since", &uq.Since}, {"until", &uq.Until}} {
		v := q.Get(p.name)
		if v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			s.writeError(w, r, errdefs.Invalid(p.name, "%q: want an RFC 3339 time, e.g. 2026-12-01T00:00:00Z", v))
			return
		}
		*p.t = t
	}
	if uq.Until.Sub(uq.Since) > MaxUsageWindow {
		s.writeError(w, r, errdefs.Invalid("since", "the window is longer than %d days", MaxUsageWindow/(24*time.Hour)))
		return
	}
	u, err := s.eng.Usage(r.Context(), uq)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, u)
}

// putKeyLimit answers PUT /v1/keys/{id}/limit (admin keys only) with the
// key's record.
func (s *Server) putKeyLimit(w http.ResponseWriter, r *http.Request) {
	var req api.KeyLimitRequest
	if err := decode(w, r, MaxJSONBody, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	k, err := s.eng.SetKeyDailyLimit(r.Context(), r.PathValue("id"), req.DailyLimitUSD, req.ResumeSuspended)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, keyToAPI(k))
}
