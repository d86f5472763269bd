package server

import (
	"context"
	"net/http"
	"strconv"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/engine"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

func checkpointToAPI(cp *store.Checkpoint) api.Checkpoint {
	out := api.Checkpoint{
		ID: engine.CheckpointID(cp.Seq), CreateTime: cp.CreateTime.UTC(), Comment: cp.Comment, Health: cp.Health,
		SizeBytes: cp.SizeBytes, Files: cp.Files, AddedBytes: cp.AddedBytes,
	}
	if cp.SourceID != "" {
		src := cp.SourceID
		out.SourceID = &src
	}
	if !cp.StoreTime.IsZero() {
		t := cp.StoreTime.UTC()
		out.StoreTime = &t
	}
	return out
}

// startOp answers a refused operation with a plain error, and streams a
// started one: info lines, then complete with conv's result or error.
func (s *Server) startOp(w http.ResponseWriter, r *http.Request, op *engine.Op, err error, conv func(any) any) {
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.long(w, r, func(ctx context.Context, progress func(string)) (any, error) {
		res, err := op.Run(ctx, progress)
		if err != nil {
			return nil, err
		}
		return conv(res), nil
	})
}

// checkpoint takes a disk checkpoint: NDJSON progress, then complete with
// the checkpoint or error checkpoint_failed.
func (s *Server) checkpoint(w http.ResponseWriter, r *http.Request) {
	var req api.CheckpointRequest
	if err := decode(w, r, MaxJSONBody, &req, true); err != nil {
		s.writeError(w, r, err)
		return
	}
	op, err := s.eng.BeginCheckpoint(r.Context(), r.PathValue("name"), req.Comment)
	s.startOp(w, r, op, err, func(res any) any { return checkpointToAPI(res.(*store.Checkpoint)) })
}

func (s *Server) listCheckpoints(w http.ResponseWriter, r *http.Request) {
	cps, err := s.eng.ListCheckpoints(r.Context(), r.PathValue("name"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := make([]api.Checkpoint, 0, len(cps))
	for _, cp := range cps {
		out = append(out, checkpointToAPI(cp))
	}
	writeJSON(w, http.StatusOK, out)
}

// getCheckpoint answers a checkpoint; with ?verify=1 it rereads every
// chunk first and records the checkpoint's health.
func (s *Server) getCheckpoint(w http.ResponseWriter, r *http.Request) {
	verify, err := boolQuery(r, "verify")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	cp, err := s.eng.GetCheckpoint(r.Context(), r.PathValue("name"), r.PathValue("id"), verify)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, checkpointToAPI(cp))
}

// restore puts the disk back as it was in a checkpoint: NDJSON progress,
// then complete with the sandbox (stopped) or error restore_failed.
func (s *Server) restore(w http.ResponseWriter, r *http.Request) {
	op, err := s.eng.BeginRestore(r.Context(), r.PathValue("name"), r.PathValue("id"))
	s.startOp(w, r, op, err, func(res any) any { return toAPI(res.(*store.Sandbox)) })
}

// diff lists paths added, modified and deleted between ?from= and {id}
// ("live" for the disk now).
func (s *Server) diff(w http.ResponseWriter, r *http.Request) {
	limit := 0
	if l := r.URL.Query().Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 1_000_000 {
			s.writeError(w, r, errdefs.Invalid("limit", "%q: want 1 to 1000000", l))
			return
		}
		limit = n
	}
	d, err := s.eng.Diff(r.Context(), r.PathValue("name"), engine.DiffOptions{
		To: r.PathValue("id"), From: r.URL.Query().Get("from"), Limit: limit,
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}
