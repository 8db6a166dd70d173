package upstream

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portcullis/portcullis/backends/egress"
	"github.com/portcullis/portcullis/tools"
)

// Options wire a Manager.
type Options struct {
	Logger *slog.Logger
	// Sandbox launches stdio servers; nil: stdio upstreams stay down.
	Sandbox Sandbox
	// Getenv reads the environment variables secrets name (serve snapshots
	// them before it scrubs its own environment).
	Getenv func(string) string
	// Resolver resolves http upstreams' names (default: the system's).
	Resolver egress.Resolver
	Now      func() time.Time
}

// Manager runs the configured upstreams and serves their tools.
type Manager struct {
	opts    Options
	log     *slog.Logger
	conns   []*conn
	auth    Authorizer
	pins    PinStore
	version atomic.Uint64

	secretMu sync.Mutex
	secrets  map[string]bool // every secret value read so far (for redaction)
}

// New checks the specs (unique names) and returns a Manager; nothing runs
// until Start.
func New(specs []Spec, opts Options) (*Manager, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Getenv == nil {
		opts.Getenv = func(string) string { return "" }
	}
	m := &Manager{opts: opts, log: opts.Logger, secrets: map[string]bool{}}
	seen := map[string]bool{}
	for i, s := range specs {
		if err := s.Validate(); err != nil {
			return nil, fmt.Errorf("upstreams[%d]: %w", i, err)
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("upstreams[%d]: name %q is used twice", i, s.Name)
		}
		seen[s.Name] = true
		m.conns = append(m.conns, &conn{spec: s, m: m, state: StateStarting, since: opts.Now()})
	}
	return m, nil
}

// Start runs every upstream's supervisor until ctx ends. auth decides and
// records stdio launches; pins keeps the tools' definition digests (nil:
// no pinning, nothing is quarantined).
func (m *Manager) Start(ctx context.Context, auth Authorizer, pins PinStore) {
	m.auth, m.pins = auth, pins
	for _, c := range m.conns {
		go c.run(ctx)
	}
}

// Version changes whenever the served tools change; the gateway rebuilds
// its catalogue (and the model-safe names) when it does.
func (m *Manager) Version() uint64 { return m.version.Load() }

func (m *Manager) bump() { m.version.Add(1) }

func (m *Manager) now() time.Time { return m.opts.Now() }

// Tools are the tools every connected upstream serves now, by name.
func (m *Manager) Tools() []tools.Tool {
	var out []tools.Tool
	for _, c := range m.conns {
		c.mu.Lock()
		for _, t := range c.tools {
			out = append(out, t)
		}
		c.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}

// ToolStatus is one upstream tool in GET /v1/upstreams.
type ToolStatus struct {
	Name            string `json:"name"`
	ServedSHA256    string `json:"served_sha256"`
	PinnedSHA256    string `json:"pinned_sha256"`
	Quarantined     bool   `json:"quarantined"`
	ReadOnlyHint    *bool  `json:"read_only_hint,omitempty"`
	DestructiveHint *bool  `json:"destructive_hint,omitempty"`
}

// Status is one upstream in GET /v1/upstreams and /readyz.
type Status struct {
	Name      string       `json:"name"`
	Transport string       `json:"transport"`
	State     string       `json:"state"`
	Since     time.Time    `json:"since"`
	Restarts  int          `json:"restarts"`
	LastError string       `json:"last_error,omitempty"`
	LaunchID  string       `json:"launch_receipt_id,omitempty"`
	Tools     []ToolStatus `json:"tools"`
}

// Status is every upstream's health and tools, by name.
func (m *Manager) Status() []Status {
	out := make([]Status, 0, len(m.conns))
	for _, c := range m.conns {
		c.mu.Lock()
		st := Status{Name: c.spec.Name, Transport: c.spec.Transport(), State: c.state, Since: c.since.UTC(),
			Restarts: c.restarts, LastError: c.lastErr, LaunchID: c.launchID, Tools: []ToolStatus{}}
		list := c.tools
		c.mu.Unlock()
		for _, t := range list {
			ts := ToolStatus{Name: t.name, ServedSHA256: t.digest, PinnedSHA256: m.pinned(c.spec.Name, t.def.Name)}
			ts.Quarantined = c.quarantined(t) != nil
			if t.def.Annotations != nil {
				ts.ReadOnlyHint = boolPtr(t.def.Annotations.ReadOnlyHint)
				ts.DestructiveHint = t.def.Annotations.DestructiveHint
			}
			st.Tools = append(st.Tools, ts)
		}
		out = append(out, st)
	}
	return out
}

func boolPtr(b bool) *bool {
	if !b {
		return nil
	}
	return &b
}

// Ready is each upstream's state for /readyz ("ready", or what it is).
func (m *Manager) Ready() map[string]string {
	out := map[string]string{}
	for _, c := range m.conns {
		c.mu.Lock()
		out[c.spec.Name] = c.state
		c.mu.Unlock()
	}
	return out
}

// secret reads ref and remembers its value so that logs can mask it.
func (m *Manager) secret(ref SecretRef) (string, error) {
	v, err := ref.read(m.opts.Getenv)
	if err != nil {
		return "", err
	}
	m.secretMu.Lock()
	m.secrets[v] = true
	m.secretMu.Unlock()
	return v, nil
}

// redact masks every secret value read so far in s (an upstream's stderr
// line, an error that may quote a header).
func (m *Manager) redact(s string) string {
	m.secretMu.Lock()
	defer m.secretMu.Unlock()
	for v := range m.secrets {
		if len(v) >= 4 {
			s = strings.ReplaceAll(s, v, "[REDACTED]")
		}
	}
	return s
}
