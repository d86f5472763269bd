package server

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
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

// eventPage reads ?limit= and ?cursor=.
func eventPage(r *http.Request) (engine.EventPage, error) {
	p := engine.EventPage{Cursor: r.URL.Query().Get("cursor")}
	if l := r.URL.Query().Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 {
			return p, errdefs.Invalid("limit", "%q: want a number from 1 to %d", l, engine.MaxEventPage)
		}
		p.Limit = n
	}
	return p, nil
}

// writeEvents answers a page of events as a JSON array, encoding one
// event at a time, with the next page's cursor in X-Next-Cursor.
func writeEvents(w http.ResponseWriter, evs []*store.Event, next string) {
	if next != "" {
		w.Header().Set(api.HeaderNextCursor, next)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	_, _ = bw.WriteString("[")
	for i, ev := range evs {
		if i > 0 {
			_, _ = bw.WriteString(",")
		}
		_ = enc.Encode(eventToAPI(ev))
	}
	_, _ = bw.WriteString("]\n")
	_ = bw.Flush()
}

// listEvents answers a page of the events delivered to the sandbox,
// oldest first.
func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	p, err := eventPage(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	evs, next, err := s.eng.Events(r.Context(), r.PathValue("name"), p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeEvents(w, evs, next)
}

// listPendingEvents answers a page of the pending events (?key= one
// key's), oldest first.
func (s *Server) listPendingEvents(w http.ResponseWriter, r *http.Request) {
	p, err := eventPage(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	evs, next, err := s.eng.PendingEvents(r.Context(), r.URL.Query().Get("key"), p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeEvents(w, evs, next)
}

// cancelEvent deletes one pending event.
func (s *Server) cancelEvent(w http.ResponseWriter, r *http.Request) {
	if err := s.eng.CancelEvent(r.Context(), r.PathValue("id")); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// cancelEvents deletes the pending events of ?key=.
func (s *Server) cancelEvents(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	if key == "" {
		s.writeError(w, r, errdefs.Invalid("key", "required: the key whose pending events to cancel"))
		return
	}
	n, err := s.eng.CancelEvents(r.Context(), key)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.CancelEventsResult{Cancelled: n})
}

// eventToAPI gives an event's body as JSON when it is JSON, as text when it
// is UTF-8, else as base64.
func eventToAPI(ev *store.Event) api.Event {
	out := api.Event{ID: ev.ID, Key: ev.Key, CreateTime: ev.CreateTime.UTC(), DeliverTime: ev.DeliverTime.UTC()}
	if ev.SandboxID == "" && !ev.ExpireTime.IsZero() {
		t := ev.ExpireTime.UTC()
		out.ExpireTime = &t
	}
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
