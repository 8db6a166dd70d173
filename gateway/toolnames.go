package gateway

import (
	"log/slog"
	"sort"
	"strconv"

	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

// toolNames is the two-way map between the tools' own names and their
// model-safe names (wire.ModelSafeName), built once from the served tools.
// A tool whose model-safe name would resolve to something else (another
// tool literally named that way, or a digest collision between hashed
// names) gets no model-safe name at all: it stays callable by its own name
// (REST, MCP) but is left out of GET /v1/tools, which could not name it to
// a model without ambiguity. Resolving never guesses.
type toolNames struct {
	safe  map[string]string // tool -> model-safe name
	tools map[string]string // model-safe name -> tool
}

// newToolNames maps names (every tool the server serves).
func newToolNames(names []string, log *slog.Logger) *toolNames {
	tn := &toolNames{safe: map[string]string{}, tools: map[string]string{}}
	own := make(map[string]bool, len(names))
	for _, n := range names {
		own[n] = true
	}
	claimed := map[string][]string{}
	for _, n := range names {
		s := wire.ModelSafeName(n)
		claimed[s] = append(claimed[s], n)
	}
	for s, ns := range claimed {
		if len(ns) > 1 || (own[s] && s != ns[0]) {
			sort.Strings(ns)
			log.Error("tools share a model-safe name; they are left out of GET /v1/tools and callable only by their own names",
				"model_safe_name", s, "tools", ns)
			continue
		}
		tn.safe[ns[0]] = s
		tn.tools[s] = ns[0]
	}
	return tn
}

// lookupTool is the one place a tool name from a client becomes a tool: its
// own name, or its model-safe name (contract §2: every endpoint that takes
// a tool name accepts either form). The call then carries the tool's own
// name into policy input, receipts, traces and metrics.
func (s *Server) lookupTool(name string) (tools.Tool, bool) {
	c := s.catalogue()
	if t, ok := c.tools[name]; ok {
		return t, true
	}
	if own, ok := c.names.tools[name]; ok {
		t, ok := c.tools[own]
		return t, ok
	}
	return nil, false
}

// canonicalToolName is name as a served tool's own name when it names one
// in either form, else name unchanged (a receipt filter may name a tool
// that is no longer served, or a name a refused call sent).
func (s *Server) canonicalToolName(name string) string {
	if t, ok := s.lookupTool(name); ok {
		return t.Name()
	}
	return name
}

// unknownTool is the refusal for a name that is no tool, in either form.
// It names only what the caller sent (parseToolCall has bounded it to a
// printable 128 bytes): listing the served tools would show
// a caller the tools the policy does not let it call (contract §2).
func unknownTool(name string) *wire.Error {
	return &wire.Error{Code: wire.CodeUnknownTool,
		Message: "unknown tool " + strconv.Quote(name) + "; GET /v1/tools (or MCP tools/list) lists the tools you may call",
		Details: map[string]any{"field": "tool"}}
}

// modelSafeList is the GET /v1/tools answer for specs (the caller's
// visible tools by their own names): each renamed to its model-safe name,
// with the map back. A tool without one (see toolNames) is left out.
func (s *Server) modelSafeList(specs []wire.FunctionSpec) wire.ToolList {
	out := wire.ToolList{Tools: make([]wire.FunctionTool, 0, len(specs)), Names: make(map[string]string, len(specs))}
	names := s.catalogue().names
	for _, spec := range specs {
		safe, ok := names.safe[spec.Name]
		if !ok {
			continue
		}
		out.Names[safe] = spec.Name
		spec.Name = safe
		out.Tools = append(out.Tools, wire.FunctionTool{Type: "function", Function: spec})
	}
	return out
}
