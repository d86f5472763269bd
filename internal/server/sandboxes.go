package server

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/engine"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

// toAPI is the sandbox object of API.md.
func toAPI(sb *store.Sandbox) api.Sandbox {
	out := api.Sandbox{
		ID: sb.ID, Name: sb.Name, State: sb.State, StateReason: sb.StateReason, Image: sb.Image,
		CPUs: sb.CPUs, MemoryMB: sb.MemoryMB, DiskMB: sb.DiskMB, Env: sb.Env, Labels: sb.Labels, Network: sb.Network,
		TimeoutMS: sb.TimeoutMS, KeepAliveWhileRunning: sb.KeepAlive, WakeOn: sb.WakeOn, CreateTime: sb.CreateTime.UTC(),
		RecoveryIntervalMS: sb.RecoveryIntervalMS,
	}
	if !sb.SuspendTime.IsZero() {
		t := sb.SuspendTime.UTC()
		out.SuspendTime = &t
	}
	if !sb.RecoveryTime.IsZero() && sb.RecoverySnapshot != "" {
		t := sb.RecoveryTime.UTC()
		out.RecoveryTime = &t
	}
	if out.Env == nil {
		out.Env = map[string]string{}
	}
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	out.Volumes = sb.Volumes
	if out.Volumes == nil {
		out.Volumes = []api.Volume{}
	}
	for _, l := range []*[]string{&out.Network.Allow, &out.Network.Deny, &out.Network.Connect} {
		if *l == nil {
			*l = []string{}
		}
	}
	if sb.SourceSandbox != "" || sb.SourceSnapshot != "" {
		out.Source = &api.Source{Sandbox: sb.SourceSandbox, Snapshot: sb.SourceSnapshot}
	}
	if sb.State != api.StateSuspended {
		// A suspended sandbox runs nowhere (its record keeps the node
		// that suspended it, where its wake is sent).
		out.Node = sb.Node
	}
	return out
}

// createSandbox answers 201 with the sandbox, or, when the client accepts
// NDJSON, streams progress (an image build on first use) and ends with
// complete or error.
func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) {
	var req api.CreateSandboxRequest
	if err := decode(w, r, MaxSecretsBody, &req, true); err != nil {
		s.writeError(w, r, err)
		return
	}
	if wantsNDJSON(r) {
		s.long(w, r, func(ctx context.Context, progress func(string)) (any, error) {
			sb, err := s.eng.Create(ctx, engine.CreateOptions{CreateSandboxRequest: req, Progress: progress})
			if err != nil {
				return nil, err
			}
			return toAPI(sb), nil
		})
		return
	}
	sb, err := s.eng.Create(r.Context(), engine.CreateOptions{CreateSandboxRequest: req})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, toAPI(sb))
}

// listSandboxes filters by ?label=k=v (repeatable; all must match).
// DefaultPageSize is a page's size when a list gives page_token and no
// limit.
const DefaultPageSize = 100

// NextPageHeader carries the token of a list's next page (page_token);
// absent on the last page.
const NextPageHeader = "X-Next-Page-Token"

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) {
	labels := map[string]string{}
	for _, l := range r.URL.Query()["label"] {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			s.writeError(w, r, errdefs.Invalid("label", "%q: want key=value", l))
			return
		}
		labels[k] = v
	}
	q := r.URL.Query()
	var sbs []*store.Sandbox
	var err error
	if q.Has("limit") || q.Has("page_token") {
		limit := DefaultPageSize
		if q.Has("limit") {
			if limit, err = strconv.Atoi(q.Get("limit")); err != nil {
				s.writeError(w, r, errdefs.Invalid("limit", "%q is not a number", q.Get("limit")))
				return
			}
		}
		var next string
		if sbs, next, err = s.eng.ListPage(r.Context(), labels, limit, q.Get("page_token")); err == nil && next != "" {
			w.Header().Set(NextPageHeader, next)
		}
	} else {
		sbs, err = s.eng.List(r.Context(), labels)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := make([]api.Sandbox, 0, len(sbs))
	for _, sb := range sbs {
		out = append(out, toAPI(sb))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) {
	sb, err := s.eng.Get(r.Context(), r.PathValue("name"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toAPI(sb))
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request) {
	if err := s.eng.Delete(r.Context(), r.PathValue("name")); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) stopSandbox(w http.ResponseWriter, r *http.Request) {
	sb, err := s.eng.Stop(r.Context(), r.PathValue("name"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toAPI(sb))
}
