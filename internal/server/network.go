package server

import (
	"net/http"

	"github.com/sbxhq/sbx/api"
)

// getNetwork answers the sandbox's rules.
func (s *Server) getNetwork(w http.ResponseWriter, r *http.Request) {
	rules, err := s.eng.GetNetwork(r.Context(), r.PathValue("name"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, rules)
}

// putNetwork replaces the sandbox's rules and answers them; a running
// sandbox has them when this answers.
func (s *Server) putNetwork(w http.ResponseWriter, r *http.Request) {
	var rules api.NetworkRules
	if err := decode(w, r, MaxJSONBody, &rules, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	out, err := s.eng.SetNetwork(r.Context(), r.PathValue("name"), rules)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// networkLog answers what the host refused for the sandbox.
func (s *Server) networkLog(w http.ResponseWriter, r *http.Request) {
	l, err := s.eng.NetworkLog(r.Context(), r.PathValue("name"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if l.Refused == nil {
		l.Refused = []api.NetworkRefusal{}
	}
	writeJSON(w, http.StatusOK, l)
}
