package gateway

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/portcullis/portcullis/wire"
)

// ProtectedResource is the OAuth 2.0 protected-resource metadata of the
// MCP endpoint (RFC 9728), which the MCP authorization specification has
// clients fetch to find the authorization server that issues tokens for
// it. The gateway serves it only when it verifies JWTs (auth.jwt): with
// API keys alone there is no authorization server to point to, and the
// well-known URLs answer 404 (not 401: the document is public).
type ProtectedResource struct {
	// AuthorizationServers are the issuers (auth.jwt.issuer) whose tokens
	// the gateway accepts.
	AuthorizationServers []string
}

// protectedResourcePaths are where RFC 9728 §3.1 puts the document for the
// resource https://host/mcp, and for the host as a whole.
var protectedResourcePaths = []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"}

func (s *Server) protectedResourceRoutes(e *echo.Echo) {
	for _, p := range protectedResourcePaths {
		e.GET(p, s.protectedResource)
	}
}

// protectedResource answers the metadata for the MCP endpoint. The
// resource identifier is the URL the client reached the gateway by
// (scheme from TLS, host from the request), which is what RFC 9728 §3.3
// has the client compare with the resource it asked about.
func (s *Server) protectedResource(c echo.Context) error {
	pr := s.opts.ProtectedResource
	if pr == nil {
		return wire.Errorf(wire.CodeNotFound, "no protected-resource metadata: this gateway verifies no JWTs (auth.jwt is not configured)")
	}
	doc := map[string]any{
		"resource":                 resourceURL(c.Request()),
		"authorization_servers":    pr.AuthorizationServers,
		"bearer_methods_supported": []string{"header"},
		"resource_name":            "Portcullis MCP endpoint",
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, b)
}

// resourceURL is the MCP endpoint's URL as this request reached it.
func resourceURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + "/mcp"
}

// resourceMetadataURL is where a client that was refused finds the
// metadata (the WWW-Authenticate resource_metadata parameter, RFC 9728 §5.1);
// "" when the request's host could not be quoted in a header parameter.
func resourceMetadataURL(r *http.Request) string {
	if r.Host == "" || strings.ContainsAny(r.Host, "\"\\ \t\r\n,;") {
		return ""
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + protectedResourcePaths[0]
}
