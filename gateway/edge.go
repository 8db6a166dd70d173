package gateway

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/portcullis/portcullis/wire"
)

// clientIP is how the gateway names a request's client in logs and spans.
// Without trusted proxies it is the TCP peer, whatever headers the request
// carries: X-Forwarded-For is anyone's to write. With trusted proxies, a
// request whose peer is one of them is attributed to the rightmost
// X-Forwarded-For address that is not itself a trusted proxy (each proxy
// appends the address it received from, so everything left of the first
// untrusted hop could have been sent by the client itself). An unparseable
// entry stops the walk at the last trusted hop.
func clientIP(trusted []*net.IPNet) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{
		// echo trusts loopback, link-local and private ranges by default:
		// only the configured proxies are believed here.
		echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false),
	}
	for _, n := range trusted {
		opts = append(opts, echo.TrustIPRange(n))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}

// apiCSP is the Content-Security-Policy of every answer but the
// explorer's (which sets its own): JSON, CSV and event streams are never
// pages, so nothing in them may run, load or be framed.
const apiCSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// noSniff marks every answer nosniff with a policy that runs nothing, so
// no answer that echoes a caller's or an upstream's text (an unknown tool's
// name, a receipt's args) can be sniffed or rendered as a page with script,
// whatever its content type. The explorer's handler replaces the policy
// with its own.
func noSniff(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Security-Policy", apiCSP)
		return next(c)
	}
}

// drainBody lets a client finish sending a request body the handler did not
// read, so it reads the answer. A body over max_body_bytes is refused (413
// too_large, with a receipt) before it is read; if the gateway then closed
// the connection with the rest of the body unread, the kernel would answer
// the client's next segments with a reset, and clients that send the whole
// body before reading (Python's urllib and requests, most SDKs) would see
// "connection reset" instead of the 413 and its receipt id. So the answer is
// flushed first and then the rest of the body is read and discarded, up to
// drainLimit bytes and within http.read_timeout, after which net/http may
// keep the connection. Only for authenticated requests: an unknown client
// gets net/http's own small discard and the connection closes, so nobody
// without a key can hold a connection open by trickling a body. A client
// that asked for "Expect: 100-continue" and got a final answer instead has
// not sent the body and will not: nothing is drained for it.
func (s *Server) drainBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if r.Body == nil || r.Body == http.NoBody {
			return next(c)
		}
		body := &eofBody{ReadCloser: r.Body}
		r.Body = body
		if err := next(c); err != nil {
			c.Error(err)
		}
		if body.eof || !c.Response().Committed || strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
			return nil
		}
		if _, ok := principalOf(c); !ok {
			return nil
		}
		_ = http.NewResponseController(c.Response().Writer).Flush()
		_, _ = io.Copy(io.Discard, io.LimitReader(body, s.drainLimit()))
		return nil
	}
}

// drainLimit bounds how much of an unread body is drained: four times
// max_body_bytes, at least 1 MiB, at most 256 MiB. A client sending more is
// cut off (and may see a reset).
func (s *Server) drainLimit() int64 {
	return min(max(4*s.opts.MaxBodyBytes, 1<<20), 256<<20)
}

// eofBody notes whether the handler read its body to the end.
type eofBody struct {
	io.ReadCloser
	eof bool
}

func (b *eofBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

// gatedDecider refuses to decide while no policy is active (a bundle
// service that was unreachable at start; the gateway retries in the
// background): the call is refused 503 backend_unavailable, with a
// receipt, instead of being denied as if a policy had said so.
type gatedDecider struct{ Decider }

func (d gatedDecider) Decide(ctx context.Context, in wire.PolicyInput) (wire.Decision, error) {
	if !d.Ready() {
		return wire.Decision{}, noPolicy()
	}
	return d.Decider.Decide(ctx, in)
}

// noPolicy is the answer to every call that needs a decision before the
// first policy bundle is active (a new error each time: callers may add
// details).
func noPolicy() *wire.Error {
	return wire.Errorf(wire.CodeBackendUnavailable,
		"no policy is active yet (the gateway is still fetching its policy bundle and retrying); the call was refused and nothing ran; retry later")
}
