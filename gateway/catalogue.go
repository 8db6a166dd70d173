package gateway

import (
	"sort"
	"sync"

	"github.com/portcullis/portcullis/tools"
)

// ToolSource serves tools that come and go: the upstream MCP servers'
// (package upstream). Version changes whenever Tools would answer
// differently.
type ToolSource interface {
	Tools() []tools.Tool
	Version() uint64
}

// catalogue is every tool the gateway serves at one moment: the built-ins
// and the upstreams' tools, by name, with their model-safe names. It is
// rebuilt whole when the upstreams' tools change, so the names map never
// mixes two generations.
type catalogue struct {
	version uint64
	tools   map[string]tools.Tool
	list    []string // sorted
	names   *toolNames
}

// catalogueCache holds the current catalogue.
type catalogueCache struct {
	mu  sync.Mutex
	cur *catalogue
}

// catalogue is the current catalogue, rebuilt when the upstreams changed.
// A built-in name always wins over an upstream tool of the same name
// (upstream names cannot take the built-ins' namespaces anyway).
func (s *Server) catalogue() *catalogue {
	var v uint64
	if s.opts.Upstreams != nil {
		v = s.opts.Upstreams.Version()
	}
	s.cat.mu.Lock()
	defer s.cat.mu.Unlock()
	if s.cat.cur != nil && s.cat.cur.version == v {
		return s.cat.cur
	}
	c := &catalogue{version: v, tools: make(map[string]tools.Tool, len(s.tools))}
	for n, t := range s.tools {
		c.tools[n] = t
	}
	if s.opts.Upstreams != nil {
		for _, t := range s.opts.Upstreams.Tools() {
			if _, taken := c.tools[t.Name()]; !taken {
				c.tools[t.Name()] = t
			}
		}
	}
	for n := range c.tools {
		c.list = append(c.list, n)
	}
	sort.Strings(c.list)
	c.names = newToolNames(c.list, s.log)
	s.cat.cur = c
	return c
}

// listFacter is a tool that tells the policy's "list" question facts about
// itself (input.resolved): an upstream tool's upstream and annotations.
type listFacter interface {
	ListFacts() map[string]any
}

// hider is a tool that is served but must not be listed now: an upstream
// tool in quarantine (its calls are refused tool_changed).
type hider interface {
	Quarantined() bool
}
