package api

import _ "embed" // for OpenAPIYAML

// OpenAPIYAML is the OpenAPI 3.1 description of this API (openapi.yaml):
// every route, body, answer and error code. sbxd serves it as JSON at
// GET /v1/openapi.json. Callers must not modify it.
//
//go:embed openapi.yaml
var OpenAPIYAML []byte
