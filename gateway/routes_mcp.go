package gateway

import (
	"github.com/labstack/echo/v4"

	"github.com/portcullis/portcullis/wire"
)

// mcpRoutes registers the MCP (Streamable HTTP) endpoint. Authentication is
// the global bearer-key middleware (/mcp is not public); the agent role is
// required as for the REST tool routes.
func (s *Server) mcpRoutes(e *echo.Echo) {
	s.mcp = newMCPSessions(s.opts.Now)
	guard := []echo.MiddlewareFunc{s.checkOrigin, s.require(wire.RoleAgent)}
	e.POST("/mcp", s.mcpPost, guard...)
	e.GET("/mcp", s.mcpGet, guard...)
	e.DELETE("/mcp", s.mcpDelete, guard...)
}
