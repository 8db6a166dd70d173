package gateway

import _ "embed"

// OpenAPIDocument is the served /openapi.json; gateway tests hold it against
// the routes and the wire types so the two cannot drift.
//
//go:embed openapi.json
var OpenAPIDocument []byte
