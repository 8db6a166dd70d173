package gateway

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
)

// headRoutes answers HEAD on every GET route (RFC 9110 §9.3.2): the same
// handler, middleware and status, with the body dropped by net/http. The
// MCP endpoint is left out: its GET is a long-lived event stream.
func (s *Server) headRoutes(e *echo.Echo) {
	have := map[string]bool{}
	for _, r := range e.Routes() {
		if r.Method == http.MethodHead {
			have[r.Path] = true
		}
	}
	for _, r := range e.Routes() {
		if r.Method != http.MethodGet || have[r.Path] || strings.HasPrefix(r.Path, "/mcp") {
			continue
		}
		have[r.Path] = true
		e.HEAD(r.Path, headAsGet(e))
	}
}

// headAsGet runs the GET route's handler (with its route middleware) for a
// HEAD request; the response writer of a HEAD request discards the body.
func headAsGet(e *echo.Echo) echo.HandlerFunc {
	return func(c echo.Context) error {
		e.Router().Find(http.MethodGet, echo.GetPath(c.Request()), c)
		return c.Handler()(c)
	}
}
