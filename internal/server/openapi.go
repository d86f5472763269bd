package server

import (
	"encoding/json"
	"fmt"
	"net/http"

	"go.yaml.in/yaml/v4"

	"github.com/sbxhq/sbx/api"
)

// openAPIJSON converts the API's OpenAPI description (YAML) to JSON. Maps
// must have string keys (an OpenAPI document's do; status codes are
// quoted).
func openAPIJSON(doc []byte) ([]byte, error) {
	var v any
	if err := yaml.Unmarshal(doc, &v); err != nil {
		return nil, fmt.Errorf("openapi.yaml: %w", err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("openapi.yaml as JSON: %w", err)
	}
	return b, nil
}

// openAPI serves GET /v1/openapi.json: api.OpenAPIYAML as JSON, converted
// once when the server was made.
func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	if s.openapiErr != nil {
		s.writeError(w, r, s.openapiErr)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(s.openapi)
}

// loadOpenAPI converts the embedded description for openAPI.
func (s *Server) loadOpenAPI() {
	s.openapi, s.openapiErr = openAPIJSON(api.OpenAPIYAML)
}
