package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxMessageBytes bounds one JSON-RPC message an upstream sends, counted
// as the bytes come in, before anything decodes them: a stdio server's
// message (one JSON value on stdout), an http upstream's response body, or
// one event of its SSE stream. It is the result cap with headroom for the
// envelope and for escapes the upstream's encoder writes longer than the
// gateway's (a result that fits maxResultBytes as the gateway re-encodes
// it fits here). An upstream past it has its session dropped (a stdio
// server is killed and started again) and the calls in flight on it fail
// backend_unavailable.
const maxMessageBytes = 2 * maxResultBytes

// errMessageTooLarge is a message past maxMessageBytes.
var errMessageTooLarge = fmt.Errorf("upstream message over the gateway's %d-byte cap", maxMessageBytes)

// oversized records that the upstream sent a message past the cap: the
// calls that fail with its session say so, until a new session is ready.
func (c *conn) oversized() {
	if c.tooLarge.CompareAndSwap(false, true) {
		c.m.log.Warn("upstream: message over the cap; dropping the session", "upstream", c.spec.Name,
			"max_message_bytes", maxMessageBytes)
	}
}

// frameReader counts the bytes of the JSON value being read from a stdio
// server's stdout (tracking strings and nesting, so a message cannot dodge
// the count with newlines between its tokens) and fails past limit, before
// the SDK's decoder buffers them. Only the close of a top-level object or
// array starts a new count: whitespace before a value counts towards it
// (the decoder buffers that too), and a top-level scalar, which no
// JSON-RPC message is, never ends one.
type frameReader struct {
	r      io.Reader
	limit  int
	trip   func()
	count  int
	depth  int
	inStr  bool
	escape bool
	err    error
}

func (f *frameReader) Read(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	n, err := f.r.Read(p)
	for i, b := range p[:n] {
		f.count++
		switch {
		case f.inStr:
			switch {
			case f.escape:
				f.escape = false
			case b == '\\':
				f.escape = true
			case b == '"':
				f.inStr = false
			}
		case b == '"':
			f.inStr = true
		case b == '{' || b == '[':
			f.depth++
		case b == '}' || b == ']':
			if f.depth > 0 {
				f.depth--
			}
			if f.depth == 0 {
				f.count = 0
			}
		}
		if f.count > f.limit {
			f.err = errMessageTooLarge
			f.trip()
			return i, f.err
		}
	}
	return n, err
}

// stdioTransport runs a stdio server as the SDK's CommandTransport does
// (newline-delimited JSON on its stdin and stdout; closing stdin, then
// SIGTERM, then SIGKILL to stop it), with its stdout read through a
// frameReader: a message past the cap kills the server at once.
type stdioTransport struct {
	c   *conn
	cmd *exec.Cmd
}

func (t *stdioTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	stdout, err := t.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := t.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if t.cmd.WaitDelay == 0 {
		// A descendant holding stderr open must not hold up Wait.
		t.cmd.WaitDelay = 2 * time.Second
	}
	if err := t.cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: t.cmd, stdin: stdin, terminate: 2 * time.Second}
	fr := &frameReader{r: stdout, limit: maxMessageBytes, trip: func() {
		t.c.oversized()
		_ = t.cmd.Process.Kill()
	}}
	// stdout is closed by Wait, once the server has exited.
	return (&mcp.IOTransport{Reader: io.NopCloser(fr), Writer: p}).Connect(ctx)
}

// process is the server's stdin; closing it stops the server.
type process struct {
	cmd       *exec.Cmd
	stdin     io.WriteCloser
	terminate time.Duration

	once sync.Once
	err  error
}

func (p *process) Write(b []byte) (int, error) { return p.stdin.Write(b) }

// Close closes the server's stdin, waits for it to exit, and signals
// SIGTERM then SIGKILL if it does not, within terminate each.
func (p *process) Close() error {
	p.once.Do(func() {
		_ = p.stdin.Close()
		done := make(chan error, 1)
		go func() { done <- p.cmd.Wait() }()
		wait := func() bool {
			select {
			case p.err = <-done:
				return true
			case <-time.After(p.terminate):
				return false
			}
		}
		if wait() {
			return
		}
		if p.cmd.Process.Signal(syscall.SIGTERM) == nil && wait() {
			return
		}
		_ = p.cmd.Process.Kill()
		if !wait() {
			p.err = errors.New("the upstream server did not exit after SIGKILL")
		}
	})
	return p.err
}

// boundTransport bounds what an http upstream's responses may make the
// SDK buffer: a body (application/json, an error page) at most
// maxMessageBytes, an SSE stream at most that per event.
type boundTransport struct {
	c    *conn
	next http.RoundTripper
}

func (b *boundTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := b.next.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	resp.Body = &boundedBody{rc: resp.Body, limit: maxMessageBytes, sse: mt == "text/event-stream", trip: b.c.oversized}
	resp.ContentLength = -1
	return resp, nil
}

// boundedBody fails a read past limit bytes: of the whole body, or with
// sse of the current event (an empty line ends one).
type boundedBody struct {
	rc        io.ReadCloser
	limit     int
	sse       bool
	trip      func()
	count     int
	lineStart bool
	err       error
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.rc.Read(p)
	for i, c := range p[:n] {
		b.count++
		if b.sse {
			switch c {
			case '\n':
				if b.lineStart {
					b.count = 0 // an empty line: the event is complete
				}
				b.lineStart = true
			case '\r':
			default:
				b.lineStart = false
			}
		}
		if b.count > b.limit {
			b.err = errMessageTooLarge
			b.trip()
			return i, b.err
		}
	}
	return n, err
}

func (b *boundedBody) Close() error { return b.rc.Close() }
