package upstream

import (
	"context"
	"fmt"

	"github.com/portcullis/portcullis/wire"
)

// PinStore keeps the definition digests the gateway trusts, per upstream
// tool, in the evidence store (so they survive restarts and replicas share
// them). Pinned is a tool's latest pin; Pin records one, by whom (the
// gateway on first sight, or the approving admin). The tool "" marks that
// the upstream itself has been seen.
type PinStore interface {
	Pinned(ctx context.Context, upstream, tool string) (digest string, ok bool, err error)
	Pin(ctx context.Context, upstream, tool, digest, by string) error
}

// pinState is the memo of an upstream's pins, reloaded at each tools/list.
type pinState struct {
	loaded bool
	pins   map[string]string // tool -> digest
}

// seenMarker is the digest recorded for the upstream-level pin.
const seenMarker = "seen"

// observe loads the pins of a freshly listed tool set. On the first sight
// of an upstream (no pin at all) it pins every tool served (trust on first
// use); afterwards a tool whose served digest is not its pin (changed), or
// that has no pin (new), is quarantined until an admin approves it.
func (m *Manager) observe(ctx context.Context, c *conn, list []*Tool) {
	if m.pins == nil {
		return
	}
	pins, err := m.loadPins(ctx, c, list)
	c.mu.Lock()
	c.pins = pinState{loaded: err == nil, pins: pins}
	c.mu.Unlock()
	if err != nil {
		m.log.Error("upstream: pins unavailable; the upstream's tools are quarantined until they load", "upstream", c.spec.Name, "err", err)
		return
	}
	for _, t := range list {
		if p, ok := pins[t.def.Name]; !ok || p != t.digest {
			m.log.Warn("upstream: tool definition not pinned; quarantined until an admin approves it",
				"upstream", c.spec.Name, "tool", t.def.Name, "served_sha256", t.digest, "pinned_sha256", p)
		}
	}
}

func (m *Manager) loadPins(ctx context.Context, c *conn, list []*Tool) (map[string]string, error) {
	pins := map[string]string{}
	_, seen, err := m.pins.Pinned(ctx, c.spec.Name, "")
	if err != nil {
		return nil, err
	}
	if !seen {
		for _, t := range list {
			if err := m.pins.Pin(ctx, c.spec.Name, t.def.Name, t.digest, "portcullis"); err != nil {
				return nil, err
			}
			pins[t.def.Name] = t.digest
		}
		return pins, m.pins.Pin(ctx, c.spec.Name, "", seenMarker, "portcullis")
	}
	for _, t := range list {
		d, ok, err := m.pins.Pinned(ctx, c.spec.Name, t.def.Name)
		if err != nil {
			return nil, err
		}
		if ok {
			pins[t.def.Name] = d
		}
	}
	return pins, nil
}

func (m *Manager) setPin(c *conn, tool, digest string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pins.pins == nil {
		c.pins = pinState{loaded: true, pins: map[string]string{}}
	}
	c.pins.pins[tool] = digest
}

func (m *Manager) pinned(upstream, tool string) string {
	for _, c := range m.conns {
		if c.spec.Name == upstream {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.pins.pins[tool]
		}
	}
	return ""
}

// quarantined is the tool_changed refusal for t when its served definition
// is not the pinned one, or nil.
func (c *conn) quarantined(t *Tool) *wire.Error {
	if c.m.pins == nil {
		return nil
	}
	c.mu.Lock()
	p, ok := c.pins.pins[t.def.Name]
	loaded := c.pins.loaded
	c.mu.Unlock()
	if loaded && ok && p == t.digest {
		return nil
	}
	return &wire.Error{Code: wire.CodeToolChanged,
		Message: fmt.Sprintf("the definition of %s is not the approved one; it is quarantined until an admin approves digest %s", t.name, t.digest),
		Details: map[string]any{"field": "tool", "served_sha256": t.digest}}
}

// Quarantined reports whether the tool is quarantined: lists leave it out
// and its calls are refused tool_changed.
func (t *Tool) Quarantined() bool { return t.up.quarantined(t) != nil }

// ErrNoSuchTool is Approve naming no served tool.
var ErrNoSuchTool = &wire.Error{Code: wire.CodeNotFound, Message: "no such upstream tool is served now", Details: map[string]any{"field": "tool"}}

// Approve pins digest for upstream's tool, on an admin's word (by). The
// digest must be the one served now: an admin approves what they saw.
func (m *Manager) Approve(ctx context.Context, upstream, tool, digest, by string) error {
	for _, c := range m.conns {
		if c.spec.Name != upstream {
			continue
		}
		c.mu.Lock()
		var served *Tool
		for _, t := range c.tools {
			if t.def.Name == tool {
				served = t
			}
		}
		c.mu.Unlock()
		if served == nil {
			return ErrNoSuchTool
		}
		if served.digest != digest {
			return &wire.Error{Code: wire.CodePreconditionFailed, Message: "definition_sha256 is not the digest served now; GET /v1/upstreams shows it",
				Details: map[string]any{"field": "definition_sha256", "served_sha256": served.digest}}
		}
		if m.pins == nil {
			return nil
		}
		if err := m.pins.Pin(ctx, upstream, tool, digest, by); err != nil {
			return err
		}
		m.setPin(c, tool, digest)
		m.bump()
		return nil
	}
	return ErrNoSuchTool
}
