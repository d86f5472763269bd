package server

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/engine"
	"github.com/sbxhq/sbx/internal/store"
)

func deliveryToAPI(d *store.Delivery) api.Delivery {
	out := api.Delivery{ID: d.ID, Name: d.Name, Seq: d.Seq, Sandbox: d.SandboxName, SandboxID: d.SandboxID,
		ArchiveDigest: d.ArchiveDigest, ArchiveBytes: d.ArchiveBytes, Files: d.Files, Digest: d.Digest,
		Previous: d.Previous, Envelope: json.RawMessage(d.Envelope), Metadata: json.RawMessage(d.Metadata),
		CreateTime: d.CreateTime.UTC()}
	if len(out.Metadata) == 0 {
		out.Metadata = json.RawMessage("null")
	}
	return out
}

// deliver packs paths of a sandbox into a signed delivery: a request that
// is invalid (a path missing, escaping, or over the size limit) is a 400
// before any work; then NDJSON progress, and complete with the delivery
// (and its teardown) or error.
func (s *Server) deliver(w http.ResponseWriter, r *http.Request) {
	var req api.DeliveryRequest
	if err := decode(w, r, MaxJSONBody, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	op, err := s.eng.BeginDeliver(r.Context(), r.PathValue("name"), req)
	s.startOp(w, r, op, err, func(res any) any {
		dr := res.(*engine.DeliveryResult)
		out := deliveryToAPI(dr.Delivery)
		out.Teardown = dr.Teardown
		return out
	})
}

func (s *Server) listDeliveries(w http.ResponseWriter, r *http.Request) {
	ds, err := s.eng.ListDeliveries(r.Context(), r.URL.Query().Get("sandbox"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := make([]api.Delivery, 0, len(ds))
	for _, d := range ds {
		out = append(out, deliveryToAPI(d))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getDelivery(w http.ResponseWriter, r *http.Request) {
	d, err := s.eng.GetDelivery(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, deliveryToAPI(d))
}

// deliveryArchive answers the archive's bytes (application/x-tar+zstd); a
// chunk lost from the blob store aborts the answer midway.
func (s *Server) deliveryArchive(w http.ResponseWriter, r *http.Request) {
	d, rc, err := s.eng.DeliveryArchive(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/x-tar+zstd")
	w.Header().Set("Content-Length", strconv.FormatInt(d.ArchiveBytes, 10))
	w.Header().Set("X-Sbx-Digest", d.ArchiveDigest)
	w.WriteHeader(http.StatusOK)
	copyOrAbort(w, rc)
}

// deliveryKey answers the node's public key (PEM) that verifies delivery
// records; X-Sbx-Key-Id is its DSSE key id.
func (s *Server) deliveryKey(w http.ResponseWriter, r *http.Request) {
	pem, id := s.eng.DeliveryPublicKey()
	w.Header().Set("Content-Type", "application/x-pem-file")
	w.Header().Set("X-Sbx-Key-Id", id)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(pem)
}
