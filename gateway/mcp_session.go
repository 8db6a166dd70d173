package gateway

import (
	"sync"
	"time"

	"github.com/google/uuid"
)

// MCP sessions are held in memory by the instance that created them. They
// carry no authority: every request is still authenticated by its bearer
// key, and a session is only usable by the principal that opened it. A
// client whose session is unknown here (gateway restarted, another replica)
// gets 404 and, as the MCP spec requires, initializes a new one.
const (
	mcpSessionIdle         = time.Hour
	mcpSessionsPerIdentity = 64
	mcpSessionsMax         = 10000
)

type mcpSession struct {
	id        string
	principal string
	version   string // negotiated protocol version
	created   time.Time
	lastUsed  time.Time
}

type mcpSessions struct {
	mu   sync.Mutex
	byID map[string]*mcpSession
	now  func() time.Time
}

func newMCPSessions(now func() time.Time) *mcpSessions {
	return &mcpSessions{byID: map[string]*mcpSession{}, now: now}
}

// open creates a session for principal. A principal holding too many
// sessions loses its least recently used one, so one agent cannot evict
// another's; the table as a whole is bounded too.
func (m *mcpSessions) open(principal, version string) (*mcpSession, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	var mine []*mcpSession
	for id, s := range m.byID {
		if now.Sub(s.lastUsed) > mcpSessionIdle {
			delete(m.byID, id)
			continue
		}
		if s.principal == principal {
			mine = append(mine, s)
		}
	}
	if len(mine) >= mcpSessionsPerIdentity {
		oldest := mine[0]
		for _, s := range mine[1:] {
			if s.lastUsed.Before(oldest.lastUsed) {
				oldest = s
			}
		}
		delete(m.byID, oldest.id)
	}
	if len(m.byID) >= mcpSessionsMax {
		return nil, false
	}
	// A random (v4) UUID: 122 bits from crypto/rand, visible ASCII as the
	// spec requires of Mcp-Session-Id.
	s := &mcpSession{id: uuid.NewString(), principal: principal, version: version, created: now, lastUsed: now}
	m.byID[s.id] = s
	return s, true
}

// get returns principal's live session id and marks it used. A session of
// another principal is reported as absent, never as forbidden, so ids cannot
// be probed.
func (m *mcpSessions) get(id, principal string) (*mcpSession, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.byID[id]
	if !ok || s.principal != principal {
		return nil, false
	}
	now := m.now()
	if now.Sub(s.lastUsed) > mcpSessionIdle {
		delete(m.byID, id)
		return nil, false
	}
	s.lastUsed = now
	return s, true
}

// close ends principal's session id; it reports whether there was one.
func (m *mcpSessions) close(id, principal string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.byID[id]
	if !ok || s.principal != principal {
		return false
	}
	delete(m.byID, id)
	return true
}
