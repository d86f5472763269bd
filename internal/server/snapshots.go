package server

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/engine"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

func snapshotToAPI(sn *store.Snapshot) api.Snapshot {
	out := api.Snapshot{
		ID: sn.ID, Name: sn.Name, Sandbox: sn.SandboxName, CreateTime: sn.CreateTime.UTC(),
		MemoryBytes: sn.MemoryBytes, DiskBytes: sn.DiskBytes, StoredBytes: sn.StoredBytes,
		Metadata: json.RawMessage(sn.Metadata), Billable: !sn.Fork,
		Health: engine.SnapshotHealth(sn),
	}
	if len(out.Metadata) == 0 {
		out.Metadata = json.RawMessage("null")
	}
	if !sn.ExpireTime.IsZero() {
		t := sn.ExpireTime.UTC()
		out.ExpireTime = &t
	}
	if !sn.StoreTime.IsZero() {
		t := sn.StoreTime.UTC()
		out.StoreTime = &t
	}
	return out
}

// snapshot takes a memory snapshot: NDJSON progress, then complete with the
// snapshot or error snapshot_failed.
func (s *Server) snapshot(w http.ResponseWriter, r *http.Request) {
	var req api.SnapshotRequest
	if err := decode(w, r, MaxJSONBody, &req, true); err != nil {
		s.writeError(w, r, err)
		return
	}
	op, err := s.eng.BeginSnapshot(r.Context(), r.PathValue("name"), req)
	s.startOp(w, r, op, err, func(res any) any { return snapshotToAPI(res.(*store.Snapshot)) })
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	sns, err := s.eng.ListSnapshots(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	sandbox := r.URL.Query().Get("sandbox")
	out := make([]api.Snapshot, 0, len(sns))
	for _, sn := range sns {
		if sandbox == "" || sn.SandboxName == sandbox || sn.SandboxID == sandbox {
			out = append(out, snapshotToAPI(sn))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) {
	sn, err := s.eng.GetSnapshot(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, snapshotToAPI(sn))
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	if err := s.eng.DeleteSnapshot(r.Context(), r.PathValue("id")); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// fork makes live copies: NDJSON progress, then complete with one result
// per copy (a sandbox or an error), or error fork_failed if the capture
// failed.
func (s *Server) fork(w http.ResponseWriter, r *http.Request) {
	var req api.ForkRequest
	if err := decode(w, r, MaxJSONBody, &req, true); err != nil {
		s.writeError(w, r, err)
		return
	}
	op, err := s.eng.BeginFork(r.Context(), r.PathValue("name"), req)
	s.startOp(w, r, op, err, func(res any) any {
		fr := res.(*engine.ForkResult)
		out := api.ForkResult{Snapshot: fr.Snapshot.ID, PausedMS: fr.PausedMS}
		for i, cp := range fr.Copies {
			if cp != nil {
				sb := toAPI(cp)
				out.Copies = append(out.Copies, api.ForkCopy{Sandbox: &sb})
			} else {
				body := s.errorOf(r.Context(), fr.Errors[i])
				out.Copies = append(out.Copies, api.ForkCopy{Error: &body})
			}
		}
		return out
	})
}

func (s *Server) listProcesses(w http.ResponseWriter, r *http.Request) {
	ps, err := s.eng.ListProcesses(r.Context(), r.PathValue("name"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ps)
}

func pidOf(r *http.Request) (int, error) {
	pid, err := strconv.Atoi(r.PathValue("pid"))
	if err != nil || pid < 1 {
		return 0, errdefs.Invalid("pid", "%q is not a process id", r.PathValue("pid"))
	}
	return pid, nil
}

// processOutput streams a process's output from ?offset= (NDJSON like a
// streamed exec: start, stdout/stderr lines, exit), following it until it
// exits. ?encoding=base64 for exact bytes.
func (s *Server) processOutput(w http.ResponseWriter, r *http.Request) {
	pid, err := pidOf(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var offset int64
	if o := r.URL.Query().Get("offset"); o != "" {
		if offset, err = strconv.ParseInt(o, 10, 64); err != nil {
			s.writeError(w, r, errdefs.Invalid("offset", "%q is not a byte offset", o))
			return
		}
	}
	enc := r.URL.Query().Get("encoding")
	if enc != "" && enc != api.EncodingUTF8 && enc != api.EncodingBase64 {
		s.writeError(w, r, errdefs.Invalid("encoding", "%q: want utf-8 or base64", enc))
		return
	}
	proc, err := s.eng.AttachProcess(r.Context(), r.PathValue("name"), pid, offset)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer proc.Close()
	s.streamProcess(w, r, proc, enc == api.EncodingBase64, nil)
}

func (s *Server) signalProcess(w http.ResponseWriter, r *http.Request) {
	pid, err := pidOf(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req api.SignalRequest
	if err := decode(w, r, MaxJSONBody, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.eng.SignalProcess(r.Context(), r.PathValue("name"), pid, req.Signal); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
