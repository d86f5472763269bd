package server

import (
	"net/http"

	"github.com/sbxhq/sbx/api"
)

// MaxSecretsBody bounds the body of a create and of PUT .../secrets: 100
// secrets of 64 KiB and their rules fit.
const MaxSecretsBody = 8 << 20

// listSecrets answers a sandbox's secrets, never their values.
func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) {
	l, err := s.eng.Secrets(r.Context(), r.PathValue("name"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, l)
}

// setSecrets replaces all of a sandbox's secrets.
func (s *Server) setSecrets(w http.ResponseWriter, r *http.Request) {
	var req api.SetSecretsRequest
	if err := decode(w, r, MaxSecretsBody, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	l, err := s.eng.SetSecrets(r.Context(), r.PathValue("name"), req.Secrets)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, l)
}

// putSecret adds one secret or replaces its value and rules.
func (s *Server) putSecret(w http.ResponseWriter, r *http.Request) {
	var req api.PutSecretRequest
	if err := decode(w, r, MaxJSONBody, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	info, err := s.eng.PutSecret(r.Context(), r.PathValue("name"), r.PathValue("secret"), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

// deleteSecret removes one secret.
func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request) {
	if err := s.eng.DeleteSecret(r.Context(), r.PathValue("name"), r.PathValue("secret")); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
