package server

import (
	"context"
	"net/http"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/disk"
	"github.com/sbxhq/sbx/internal/store"
)

func imageToAPI(img *store.Image) api.Image {
	env := img.Env
	if env == nil {
		env = []string{}
	}
	return api.Image{Name: img.Name, Digest: img.Digest, Source: img.Source, SizeBytes: img.SizeBytes,
		CreateTime: img.CreateTime.UTC(), Env: env}
}

func (s *Server) listImages(w http.ResponseWriter, r *http.Request) {
	imgs, err := s.eng.ListImages(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := make([]api.Image, 0, len(imgs))
	for _, img := range imgs {
		out = append(out, imageToAPI(img))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getImage(w http.ResponseWriter, r *http.Request) {
	img, err := s.eng.GetImage(r.Context(), r.PathValue("name"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, imageToAPI(img))
}

func (s *Server) deleteImage(w http.ResponseWriter, r *http.Request) {
	if err := s.eng.RemoveImage(r.Context(), r.PathValue("name")); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// buildImage builds with mmdebstrap; NDJSON progress, then the image.
func (s *Server) buildImage(w http.ResponseWriter, r *http.Request) {
	var req api.BuildImageRequest
	if err := decode(w, r, MaxJSONBody, &req, true); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.long(w, r, func(ctx context.Context, progress func(string)) (any, error) {
		img, err := s.eng.BuildImage(ctx, req, progress)
		if err != nil {
			return nil, err
		}
		return imageToAPI(img), nil
	})
}

// pullImage pulls from an OCI registry; NDJSON progress, then the image.
func (s *Server) pullImage(w http.ResponseWriter, r *http.Request) {
	var req api.PullImageRequest
	if err := decode(w, r, MaxJSONBody, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.long(w, r, func(ctx context.Context, progress func(string)) (any, error) {
		img, err := s.eng.PullImage(ctx, req, progress)
		if err != nil {
			return nil, err
		}
		return imageToAPI(img), nil
	})
}

// importImage reads an archive body (docker-save, OCI layout tar, or root
// filesystem tar; gzip allowed) for the image ?name=; NDJSON progress.
func (s *Server) importImage(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	if err := disk.ValidateImageName(name); err != nil {
		s.writeError(w, r, err)
		return
	}
	// Progress lines go out while the body still comes in.
	_ = http.NewResponseController(w).EnableFullDuplex()
	s.long(w, r, func(ctx context.Context, progress func(string)) (any, error) {
		img, err := s.eng.ImportImage(ctx, name, r.Body, progress)
		if err != nil {
			return nil, err
		}
		return imageToAPI(img), nil
	})
}
