package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/wire"
)

// MCP sessions are held in memory by the instance that created them (the
// SDK's StreamableHTTPHandler keeps their state). They carry no authority:
// every request is still authenticated, and a session is only usable by
// the principal that opened it: the edge looks the session up by id and
// principal before the SDK sees the request. A client whose session is
// unknown here (gateway restarted, another replica) gets 404 and, as the
// MCP spec requires, initializes a new one.
const (
	mcpSessionIdle         = time.Hour // the SDK closes a session idle this long
	mcpSessionsPerIdentity = 64
	mcpSessionsMax         = 10000
)

// mcpEndpoint is the MCP endpoint's state: the SDK handler, one MCP server
// per principal (each with the tools that principal may see, so the SDK
// pushes notifications/tools/list_changed to exactly the sessions whose
// list changed), and which principal opened which session.
type mcpEndpoint struct {
	handler *mcp.StreamableHTTPHandler
	now     func() time.Time

	mu       sync.Mutex
	servers  map[string]*mcpServer  // by principalKey
	sessions map[string]*mcpSession // by session id

	pendingByID  map[string]int // initializes under way, by principal id
	pendingTotal int            // initializes under way

	// requests are the requests being served, by the token the edge puts
	// in headerMCPRequest (mcpServe).
	requests sync.Map

	// stopping ends when the gateway shuts down: the GET streams close.
	stopping context.Context
	stop     context.CancelFunc
}

// mcpServer is the SDK server of one principal.
type mcpServer struct {
	key string
	p   wire.Principal
	srv *mcp.Server

	syncMu sync.Mutex        // serializes syncMCPTools
	listed map[string]string // tool name -> its listing (JSON), as registered

	// guarded by mcpEndpoint.mu
	sessions int // registered sessions
	pending  int // initializes under way
}

type mcpSession struct {
	id       string
	server   *mcpServer
	ss       *mcp.ServerSession
	version  string // negotiated protocol revision
	lastUsed time.Time
	streams  int // open GET streams (notifications/tools/list_changed reach the client on one)
}

// mcpRequest is what the SDK's handlers learn of the HTTP request they
// serve: its context (trace, cancellation when the client goes away), the
// caller, and whether the client reads SSE (progress notifications).
type mcpRequest struct {
	ctx context.Context // handed across the SDK, whose handlers run in the session's context
	key string
	sse bool
}

func newMCPEndpoint(now func() time.Time) *mcpEndpoint {
	m := &mcpEndpoint{now: now, servers: map[string]*mcpServer{}, sessions: map[string]*mcpSession{}, pendingByID: map[string]int{}}
	m.stopping, m.stop = context.WithCancel(context.Background())
	return m
}

// StopMCPStreams ends the MCP sessions' GET streams (clients reconnect
// them; the sessions stay). http.Server.Shutdown waits for every request
// in flight, which a stream never stops being: serve registers this with
// RegisterOnShutdown.
func (s *Server) StopMCPStreams() { s.mcp.stop() }

// principalKey names a principal exactly: id, roles and attributes. Two
// credentials of one id with different roles or claims get different MCP
// servers (their tool lists may differ) and cannot use each other's
// sessions.
func principalKey(p wire.Principal) string {
	roles := slices.Clone(p.Roles)
	slices.Sort(roles)
	b, err := json.Marshal(struct {
		ID    string         `json:"id"`
		Roles []string       `json:"roles"`
		Attrs map[string]any `json:"attributes"`
	}{p.ID, roles, p.Attributes})
	if err != nil {
		b = []byte("unencodable:" + p.ID) // attributes come from JSON; not expected
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

type mcpServerKey struct{}

func withMCPServer(ctx context.Context, ps *mcpServer) context.Context {
	return context.WithValue(ctx, mcpServerKey{}, ps)
}

func mcpServerOf(ctx context.Context) *mcpServer {
	ps, _ := ctx.Value(mcpServerKey{}).(*mcpServer)
	return ps
}

// admit makes room for a new session of p and returns p's server, marked
// as having an initialize under way (release it with admitted). A
// principal (by id: every credential of it together) holding too many
// sessions loses its least recently used ones, so one agent cannot evict
// another's; the table as a whole is bounded too. Initializes under way
// count against both bounds, so a burst of concurrent initializes cannot
// open more sessions than either allows.
func (m *mcpEndpoint) admit(s *Server, p wire.Principal) (*mcpServer, bool) {
	key := principalKey(p)
	m.mu.Lock()
	var mine []*mcpSession
	for _, sess := range m.sessions {
		if sess.server.p.ID == p.ID {
			mine = append(mine, sess)
		}
	}
	var evict []*mcpSession
	if over := len(mine) + m.pendingByID[p.ID] - mcpSessionsPerIdentity + 1; over > 0 {
		if over > len(mine) {
			// Only initializes under way fill the quota: refuse this one.
			m.mu.Unlock()
			return nil, false
		}
		slices.SortFunc(mine, func(a, b *mcpSession) int { return a.lastUsed.Compare(b.lastUsed) })
		evict = mine[:over]
		for _, sess := range evict {
			m.dropLocked(sess.id)
		}
	}
	if len(m.sessions)+m.pendingTotal >= mcpSessionsMax {
		m.mu.Unlock()
		for _, sess := range evict {
			_ = sess.ss.Close()
		}
		return nil, false
	}
	ps := m.servers[key]
	if ps == nil {
		ps = s.newMCPServer(key, p)
		m.servers[key] = ps
	}
	ps.pending++
	m.pendingByID[p.ID]++
	m.pendingTotal++
	m.mu.Unlock()
	for _, sess := range evict {
		_ = sess.ss.Close()
	}
	return ps, true
}

// admitted ends an initialize admit started.
func (m *mcpEndpoint) admitted(ps *mcpServer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ps.pending--
	m.pendingTotal--
	if m.pendingByID[ps.p.ID]--; m.pendingByID[ps.p.ID] <= 0 {
		delete(m.pendingByID, ps.p.ID)
	}
	m.gcLocked(ps)
}

// register binds a session the SDK opened to its server's principal, until
// the session ends (DELETE, idle timeout, eviction).
func (m *mcpEndpoint) register(ps *mcpServer, ss *mcp.ServerSession, version string) {
	id := ss.ID()
	if id == "" {
		return
	}
	m.mu.Lock()
	m.sessions[id] = &mcpSession{id: id, server: ps, ss: ss, version: version, lastUsed: m.now()}
	ps.sessions++
	m.mu.Unlock()
	go func() {
		_ = ss.Wait()
		m.forget(id)
	}()
}

// session returns key's live session id and marks it used.
func (m *mcpEndpoint) session(id, key string) (*mcpSession, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sess, ok := m.sessions[id]
	if !ok || sess.server.key != key {
		return nil, false
	}
	sess.lastUsed = m.now()
	return sess, true
}

// version is the negotiated revision of session id ("" when unknown).
func (m *mcpEndpoint) version(id string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if sess, ok := m.sessions[id]; ok {
		return sess.version
	}
	return ""
}

// listening counts session id's open GET streams up or down.
func (m *mcpEndpoint) listening(id string, d int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if sess, ok := m.sessions[id]; ok {
		sess.streams += d
	}
}

// forget drops session id from the table (the SDK has closed it, or is
// closing it).
func (m *mcpEndpoint) forget(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dropLocked(id)
}

func (m *mcpEndpoint) dropLocked(id string) {
	sess, ok := m.sessions[id]
	if !ok {
		return
	}
	delete(m.sessions, id)
	sess.server.sessions--
	m.gcLocked(sess.server)
}

// gcLocked drops a server no session uses.
func (m *mcpEndpoint) gcLocked(ps *mcpServer) {
	if ps.sessions == 0 && ps.pending == 0 && m.servers[ps.key] == ps {
		delete(m.servers, ps.key)
	}
}

// listeningServers are the servers with a session whose GET stream is
// open: the ones a notification can reach now.
func (m *mcpEndpoint) listeningServers() []*mcpServer {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[*mcpServer]bool{}
	var out []*mcpServer
	for _, sess := range m.sessions {
		if sess.streams > 0 && !seen[sess.server] {
			seen[sess.server] = true
			out = append(out, sess.server)
		}
	}
	return out
}
