package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/sbxhq/sbx/internal/engine"
	"github.com/sbxhq/sbx/internal/errdefs"
)

// boolQuery reads a boolean query parameter: 1/true/yes or absent.
func boolQuery(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, errdefs.Invalid(name, "%q is not a boolean", v)
	}
	return b, nil
}

// maxBytesQuery reads max_bytes: a positive number of bytes, or absent
// for engine.DefaultMaxBytes.
func maxBytesQuery(r *http.Request) (int64, error) {
	v := r.URL.Query().Get("max_bytes")
	if v == "" {
		return engine.DefaultMaxBytes, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 {
		return 0, errdefs.Invalid("max_bytes", "%q is not a positive number of bytes", v)
	}
	return n, nil
}

// getFile answers a file's bytes, or with list=1 a directory's entries.
func (s *Server) getFile(w http.ResponseWriter, r *http.Request) {
	name, path := r.PathValue("name"), r.URL.Query().Get("path")
	list, err := boolQuery(r, "list")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if list {
		ents, err := s.eng.ListDir(r.Context(), name, path)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, ents)
		return
	}
	maxBytes, err := maxBytesQuery(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	size, mode, rc, err := s.eng.OpenFile(r.Context(), name, path, maxBytes)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.Header().Set("X-Sbx-Mode", fmt.Sprintf("%04o", mode))
	w.WriteHeader(http.StatusOK)
	copyOrAbort(w, rc)
}

// copyOrAbort streams rc to the client; if the source fails midway, the
// connection is cut (http.ErrAbortHandler), so that the client sees an
// error rather than a short file or archive that looks whole.
func copyOrAbort(w http.ResponseWriter, rc io.Reader) {
	if _, err := io.Copy(w, rc); err != nil {
		panic(http.ErrAbortHandler)
	}
}

// FileWritten is the answer of PUT .../files.
type FileWritten struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	Mode uint32 `json:"mode"`
}

// putFile writes the body to path; mode is octal (default 0644).
func (s *Server) putFile(w http.ResponseWriter, r *http.Request) {
	var mode uint64 = 0o644
	if m := r.URL.Query().Get("mode"); m != "" {
		var err error
		if mode, err = strconv.ParseUint(m, 8, 32); err != nil || mode > 0o7777 {
			s.writeError(w, r, errdefs.Invalid("mode", "%q is not an octal permission mode like 0644", m))
			return
		}
	}
	path := r.URL.Query().Get("path")
	body, err := s.uploadBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	n, err := s.eng.WriteFile(r.Context(), r.PathValue("name"), path, uint32(mode), body)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, FileWritten{Path: path, Size: n, Mode: uint32(mode)})
}

func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request) {
	recursive, err := boolQuery(r, "recursive")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.eng.RemoveFile(r.Context(), r.PathValue("name"), r.URL.Query().Get("path"), recursive); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) getArchive(w http.ResponseWriter, r *http.Request) {
	maxBytes, err := maxBytesQuery(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	typ, rc, err := s.eng.TarOut(r.Context(), r.PathValue("name"), r.URL.Query().Get("path"), maxBytes)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/x-tar")
	w.Header().Set("X-Sbx-Type", typ)
	w.WriteHeader(http.StatusOK)
	copyOrAbort(w, rc)
}

// ArchiveWritten is the answer of PUT .../archive.
type ArchiveWritten struct {
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
}

func (s *Server) putArchive(w http.ResponseWriter, r *http.Request) {
	body, err := s.uploadBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	files, n, err := s.eng.TarIn(r.Context(), r.PathValue("name"), r.URL.Query().Get("path"), body)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ArchiveWritten{Files: files, Bytes: n})
}

// uploadBody bounds the body of a file or archive upload: at most
// MaxUploadBytes, and at most the sandbox's disk quota. A body whose
// Content-Length says it is larger is refused before anything is written
// (413 too_large); one that grows past the bound while it streams fails
// there (the agent removes the file it was writing).
func (s *Server) uploadBody(w http.ResponseWriter, r *http.Request) (io.Reader, error) {
	limit := s.cfg.MaxUploadBytes
	if q, err := s.eng.DiskQuotaBytes(r.Context(), r.PathValue("name")); err != nil {
		return nil, err
	} else if q > 0 && q < limit {
		limit = q
	}
	if r.ContentLength > limit {
		return nil, errdefs.New(errdefs.ErrTooLarge, "body: %d bytes, more than this upload may have (%d bytes: the smaller of sbxd's upload limit and the sandbox's disk quota)", r.ContentLength, limit)
	}
	return tooLargeReader{http.MaxBytesReader(w, r.Body, limit)}, nil
}

// tooLargeReader turns the error of a body past its bound into ErrTooLarge,
// so that it stays a 413 through the engine, which would otherwise take
// the broken agent connection for the sandbox's doing.
type tooLargeReader struct{ r io.Reader }

func (t tooLargeReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		err = errdefs.New(errdefs.ErrTooLarge, "request body is larger than %d bytes", mbe.Limit)
	}
	return n, err
}
