package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Upstream states, as GET /v1/upstreams and /readyz show them.
const (
	StateStarting = "starting"
	StateReady    = "ready"
	StateDown     = "down"    // not connected; restarting with backoff
	StateRefused  = "refused" // the policy did not allow the launch
)

// conn is one upstream: its supervisor loop, live session and tools.
type conn struct {
	spec Spec
	m    *Manager

	mu       sync.Mutex
	sess     *mcp.ClientSession
	tools    []*Tool // sorted by name
	state    string
	lastErr  string // for the operator: never a secret value
	restarts int
	since    time.Time
	launchID string // the receipt of the last launch (stdio)
	pins     pinState
	// refreshing serializes tool list refreshes; refreshPending says one
	// is waiting to start.
	refreshing     sync.Mutex
	refreshPending atomic.Bool
	refreshedAt    time.Time // when the last refresh ended (under mu)
	// tooLarge says the session was dropped for a message past
	// maxMessageBytes; cleared when the next session is ready.
	tooLarge atomic.Bool
}

func (c *conn) timeout() time.Duration {
	if c.spec.Timeout > 0 {
		return c.spec.Timeout
	}
	return DefaultTimeout
}

// backend is what evidence records as having run a call to this upstream.
func (c *conn) backend() string { return "mcp-" + c.spec.Transport() }

func (c *conn) session() *mcp.ClientSession {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != StateReady {
		return nil
	}
	return c.sess
}

// lost closes the session after a call found it broken, so the supervisor
// reconnects (and, for stdio, restarts the server).
func (c *conn) lost(err error) {
	c.mu.Lock()
	sess := c.sess
	c.mu.Unlock()
	if sess != nil {
		c.m.log.Warn("upstream: session lost; reconnecting", "upstream", c.spec.Name, "err", c.m.redact(err.Error()))
		_ = sess.Close()
	}
}

func (c *conn) setState(state string, err error) {
	c.mu.Lock()
	c.state, c.since = state, c.m.now()
	if err != nil {
		c.lastErr = c.m.redact(err.Error())
	} else if state == StateReady {
		c.lastErr = ""
		c.tooLarge.Store(false)
	}
	c.mu.Unlock()
}

// run supervises the upstream until ctx ends: connect (launching a stdio
// server under the policy's launch scope), serve, and when the session
// ends, reconnect with exponential backoff (reset once a session stayed up
// a minute).
func (c *conn) run(ctx context.Context) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = 250*time.Millisecond, 30*time.Second
	for ctx.Err() == nil {
		up, err := c.serveOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if up > time.Minute {
			b.Reset()
		}
		state := StateDown
		if errors.Is(err, ErrLaunchRefused) {
			state = StateRefused
		}
		c.setState(state, err)
		c.clearTools()
		c.mu.Lock()
		c.restarts++
		c.mu.Unlock()
		wait := b.NextBackOff()
		c.m.log.Warn("upstream: not connected; retrying", "upstream", c.spec.Name, "state", state,
			"err", c.m.redact(fmt.Sprint(err)), "retry_in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// serveOnce connects, lists the tools and waits for the session to end. It
// says how long the session was up.
func (c *conn) serveOnce(ctx context.Context) (time.Duration, error) {
	c.setState(StateStarting, nil)
	tr, cleanup, err := c.transport(ctx)
	if err != nil {
		return 0, err
	}
	defer cleanup()
	client := mcp.NewClient(&mcp.Implementation{Name: "portcullis", Version: "1"}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			// Not on the session's read loop: refresh calls back into it.
			// Notifications that arrive while one refresh waits to start
			// are coalesced into it, so a server flooding list_changed
			// costs at most one waiting and one running refresh.
			// And a refresh starts at most once per minRefreshInterval: each
			// one lists every tool and reads its pin from the store, which a
			// server sending list_changed without end would otherwise keep
			// doing back to back.
			if !c.refreshPending.CompareAndSwap(false, true) {
				return
			}
			go func() {
				c.mu.Lock()
				wait := time.Until(c.refreshedAt.Add(minRefreshInterval))
				c.mu.Unlock()
				if wait > 0 {
					select {
					case <-ctx.Done():
						c.refreshPending.Store(false)
						return
					case <-time.After(wait):
					}
				}
				c.refreshing.Lock()
				c.refreshPending.Store(false)
				c.refreshing.Unlock()
				if err := c.refresh(ctx); err != nil {
					c.m.log.Warn("upstream: refreshing tools after list_changed failed", "upstream", c.spec.Name, "err", c.m.redact(err.Error()))
				}
			}()
		},
	})
	cctx, cancel := context.WithTimeout(ctx, c.timeout())
	sess, err := client.Connect(cctx, tr, nil)
	cancel()
	if err != nil {
		return 0, fmt.Errorf("connect: %w", err)
	}
	c.mu.Lock()
	c.sess = sess
	c.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { _ = sess.Close() })
	defer stop()
	if err := c.refresh(ctx); err != nil {
		_ = sess.Close()
		return 0, fmt.Errorf("tools/list: %w", err)
	}
	c.setState(StateReady, nil)
	start := time.Now()
	c.m.log.Info("upstream: connected", "upstream", c.spec.Name, "transport", c.spec.Transport(), "tools", len(c.toolNames()))
	err = sess.Wait()
	c.mu.Lock()
	c.sess = nil
	c.mu.Unlock()
	if err == nil {
		err = errors.New("session ended")
	}
	return time.Since(start), err
}

// refresh lists the upstream's tools and replaces the served ones; the
// catalogue (and the model-safe names map) is rebuilt from them.
func (c *conn) refresh(ctx context.Context) error {
	c.refreshing.Lock()
	defer c.refreshing.Unlock()
	defer func() {
		c.mu.Lock()
		c.refreshedAt = time.Now()
		c.mu.Unlock()
	}()
	c.mu.Lock()
	sess := c.sess
	c.mu.Unlock()
	if sess == nil {
		return errors.New("not connected")
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	defs, err := listTools(ctx, sess)
	if err != nil {
		return err
	}
	count := map[string]int{}
	for _, def := range defs {
		count[def.Name]++
	}
	var list []*Tool
	for _, def := range defs {
		if count[def.Name] > 1 {
			// Which definition would be served, pinned or approved is
			// ambiguous: none is.
			c.m.log.Warn("upstream: tool listed more than once; none of its definitions is served", "upstream", c.spec.Name, "tool", truncate(def.Name, 100))
			continue
		}
		t, err := newTool(c, def)
		if err != nil {
			c.m.log.Warn("upstream: tool not served", "upstream", c.spec.Name, "tool", truncate(def.Name, 100), "err", err)
			continue
		}
		list = append(list, t)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].name < list[j].name })
	c.m.observe(ctx, c, list)
	c.mu.Lock()
	c.tools = list
	c.mu.Unlock()
	c.m.bump()
	return nil
}

// minRefreshInterval is the least time between two refreshes a server's
// notifications/tools/list_changed start.
const minRefreshInterval = time.Second

// Bounds on one upstream's tools/list: a hostile server that pages
// without end (or lists millions of tools) is cut off there rather than
// filling the gateway's memory until the upstream's timeout.
const (
	maxUpstreamTools = 1000
	maxToolPages     = 100
	// maxToolListBytes bounds the definitions (as JSON) of one listing.
	maxToolListBytes = 16 << 20
)

// listTools is every tool the upstream lists, page by page, within
// maxUpstreamTools and maxToolPages (past either, an error: the listing is
// not trusted in part).
func listTools(ctx context.Context, sess *mcp.ClientSession) ([]*mcp.Tool, error) {
	var defs []*mcp.Tool
	size := 0
	params := &mcp.ListToolsParams{}
	for page := 1; ; page++ {
		res, err := sess.ListTools(ctx, params)
		if err != nil {
			return nil, err
		}
		defs = append(defs, res.Tools...)
		if len(defs) > maxUpstreamTools {
			return nil, fmt.Errorf("the upstream lists more than %d tools; none is served", maxUpstreamTools)
		}
		for _, def := range res.Tools {
			b, err := json.Marshal(def)
			if err != nil {
				return nil, fmt.Errorf("tool %q: %w", truncate(def.Name, 100), err)
			}
			if size += len(b); size > maxToolListBytes {
				return nil, fmt.Errorf("the upstream's tool definitions pass %d bytes; none is served", maxToolListBytes)
			}
		}
		if res.NextCursor == "" {
			return defs, nil
		}
		if page >= maxToolPages {
			return nil, fmt.Errorf("the upstream's tool list runs past %d pages; none is served", maxToolPages)
		}
		params = &mcp.ListToolsParams{Cursor: res.NextCursor}
	}
}

func (c *conn) clearTools() {
	c.mu.Lock()
	had := len(c.tools) > 0
	c.tools = nil
	c.mu.Unlock()
	if had {
		c.m.bump()
	}
}

func (c *conn) toolNames() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.tools))
	for _, t := range c.tools {
		out = append(out, t.name)
	}
	return out
}
