package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"unicode/utf8"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/engine"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

// updateSandbox changes timeout_ms and keep_alive_while_running.
func (s *Server) updateSandbox(w http.ResponseWriter, r *http.Request) {
	var req api.UpdateSandboxRequest
	if err := decode(w, r, MaxJSONBody, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	sb, err := s.eng.Update(r.Context(), r.PathValue("name"), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toAPI(sb))
}

// suspendSandbox answers the suspended sandbox (NDJSON progress when
// asked for), whatever the client does meanwhile.
func (s *Server) suspendSandbox(w http.ResponseWriter, r *http.Request) {
	var req api.SuspendRequest
	if err := decode(w, r, MaxJSONBody, &req, true); err != nil {
		s.writeError(w, r, err)
		return
	}
	name := r.PathValue("name")
	if wantsNDJSON(r) {
		s.long(w, r, func(ctx context.Context, progress func(string)) (any, error) {
			sb, err := s.eng.Suspend(ctx, name, req, progress)
			if err != nil {
				return nil, err
			}
			return toAPI(sb), nil
		})
		return
	}
	sb, err := s.eng.Suspend(context.WithoutCancel(r.Context()), name, req, nil)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toAPI(sb))
}

// resumeSandbox answers the running sandbox.
func (s *Server) resumeSandbox(w http.ResponseWriter, r *http.Request) {
	if err := decode(w, r, MaxJSONBody, &struct{}{}, true); err != nil {
		s.writeError(w, r, err)
		return
	}
	name := r.PathValue("name")
	if wantsNDJSON(r) {
		s.long(w, r, func(ctx context.Context, progress func(string)) (any, error) {
			sb, err := s.eng.Resume(ctx, name, progress)
			if err != nil {
				return nil, err
			}
			return toAPI(sb), nil
		})
		return
	}
	sb, err := s.eng.Resume(context.WithoutCancel(r.Context()), name, nil)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toAPI(sb))
}

// postEvent takes any body up to 1 MiB (JSON, text or bytes).
func (s *Server) postEvent(w http.ResponseWriter, r *http.Request) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, engine.MaxEventBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			err = errdefs.New(errdefs.ErrTooLarge, "an event's body is at most %d bytes", engine.MaxEventBytes)
		}
		s.writeError(w, r, err)
		return
	}
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err == nil {
		ct = mt
	}
	res, err := s.eng.PostEvent(r.Context(), r.PathValue("key"), data, ct)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := api.EventResult{ID: res.Event.ID, Woken: []string{}, Pending: len(res.Woken) == 0}
	for _, sb := range res.Woken {
		out.Woken = append(out.Woken, sb.Name)
	}
	if out.Pending {
		t := res.Event.ExpireTime.UTC()
		out.ExpireTime = &t
	}
	writeJSON(w, http.StatusAccepted, out)
}

// listEvents answers the events delivered to the sandbox, oldest first.
func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	evs, err := s.eng.Events(r.Context(), r.PathValue("name"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := make([]api.Event, 0, len(evs))
	for _, ev := range evs {
		out = append(out, eventToAPI(ev))
	}
	writeJSON(w, http.StatusOK, out)
}

// eventToAPI gives an event's body as JSON when it is JSON, as text when it
// is UTF-8, else as base64.
func eventToAPI(ev *store.Event) api.Event {
	out := api.Event{ID: ev.ID, Key: ev.Key, CreateTime: ev.CreateTime.UTC(), DeliverTime: ev.DeliverTime.UTC()}
	switch {
	case len(ev.Data) == 0:
	case json.Valid(ev.Data):
		out.Data = json.RawMessage(ev.Data)
	case utf8.Valid(ev.Data):
		out.DataText = string(ev.Data)
	default:
		out.DataBase64 = base64.StdEncoding.EncodeToString(ev.Data)
	}
	return out
}
