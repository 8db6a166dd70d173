package egress

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portcullis/portcullis/wire"
)

// Options configure a Proxy.
type Options struct {
	// Allow is the call's allowlist. Nil allows nothing.
	Allow *Allowlist
	// Resolver resolves allowed names. Default: net.DefaultResolver.
	Resolver Resolver
	// Logger receives refusals and failures. Default: slog.Default().
	Logger *slog.Logger
	// DialTimeout bounds the resolution plus the connect. Default 10 s.
	DialTimeout time.Duration
	// HandshakeTimeout bounds reading the client's request. Default 10 s.
	HandshakeTimeout time.Duration
	// MaxConns caps simultaneous client connections. Default 64.
	MaxConns int
	// Dial connects to a checked address. Default: a net.Dialer. Tests
	// use it to observe that the pinned address is what gets dialed.
	Dial func(ctx context.Context, addr netip.AddrPort) (net.Conn, error)
}

// Proxy serves one call. It speaks HTTP CONNECT, plain HTTP proxying of
// absolute-form requests, and SOCKS5 (no auth, CONNECT), told apart by the
// first byte. It is safe for concurrent use.
type Proxy struct {
	opts Options
	log  *slog.Logger
	sem  chan struct{}

	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	ln      net.Listener
	conns   map[net.Conn]struct{}
	closed  bool
	stats   wire.NetworkStats
	seen    map[string]bool
	wg      sync.WaitGroup
	bytesIn atomic.Int64
	bytesUp atomic.Int64
}

// New returns a Proxy.
func New(opts Options) *Proxy {
	if opts.Allow == nil {
		opts.Allow = &Allowlist{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 10 * time.Second
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = 10 * time.Second
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = 64
	}
	if opts.Dial == nil {
		d := &net.Dialer{}
		opts.Dial = func(ctx context.Context, a netip.AddrPort) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", a.String())
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Proxy{
		opts: opts, log: opts.Logger, sem: make(chan struct{}, opts.MaxConns),
		ctx: ctx, cancel: cancel,
		conns: map[net.Conn]struct{}{}, seen: map[string]bool{},
		stats: wire.NetworkStats{Allowed: []string{}, Refused: []string{}, Denials: map[string]string{}},
	}
}

// Serve accepts connections on l until l is closed or Close is called.
func (p *Proxy) Serve(l net.Listener) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = l.Close()
		return net.ErrClosed
	}
	p.ln = l
	p.mu.Unlock()
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("egress: accept: %w", err)
		}
		if !p.track(c) {
			_ = c.Close()
			return nil
		}
		p.wg.Go(func() {
			defer p.untrack(c)
			select {
			case p.sem <- struct{}{}:
				defer func() { <-p.sem }()
			default:
				return // over the cap: drop
			}
			p.handle(c)
		})
	}
}

// Close stops accepting, closes every tunnel and waits for the handlers.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return nil
	}
	p.closed = true
	p.cancel()
	if p.ln != nil {
		_ = p.ln.Close()
	}
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}

// Stats returns what the proxy saw so far.
func (p *Proxy) Stats() wire.NetworkStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Allowed = append([]string{}, s.Allowed...)
	s.Refused = append([]string{}, s.Refused...)
	s.Denials = make(map[string]string, len(p.stats.Denials))
	for k, v := range p.stats.Denials {
		s.Denials[k] = v
	}
	s.BytesOut = p.bytesUp.Load()
	s.BytesIn = p.bytesIn.Load()
	return s
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	_ = c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// record attributes one request to the call.
func (p *Proxy) record(target string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.Connections++
	key := target
	if err != nil {
		key = "refused " + target
	}
	if p.seen[key] {
		return
	}
	p.seen[key] = true
	if err != nil {
		p.stats.Refused = append(p.stats.Refused, target)
		p.stats.Denials[target] = err.Error()
	} else {
		p.stats.Allowed = append(p.stats.Allowed, target)
	}
}

// connect checks and dials host:port, recording the outcome.
func (p *Proxy) connect(host string, port int) (net.Conn, error) {
	target := net.JoinHostPort(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), strconv.Itoa(port))
	ctx, cancel := context.WithTimeout(p.ctx, p.opts.DialTimeout)
	defer cancel()
	addr, err := p.opts.Allow.Resolve(ctx, p.opts.Resolver, host, port)
	if err == nil {
		var c net.Conn
		c, err = p.opts.Dial(ctx, addr)
		if err == nil {
			p.record(target, nil)
			return c, nil
		}
		err = fmt.Errorf("egress: connecting to %s (%s): %w", target, addr, err)
	}
	p.record(target, err)
	p.log.Info("egress: refused", "target", target, "reason", err.Error())
	return nil, err
}

func (p *Proxy) handle(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(p.opts.HandshakeTimeout))
	br := bufio.NewReader(c)
	first, err := br.Peek(1)
	if err != nil {
		return
	}
	if first[0] == 5 {
		p.socks5(c, br)
		return
	}
	p.http(c, br)
}

// pipe copies both ways until either side is done, counting bytes.
func (p *Proxy) pipe(client net.Conn, clientR io.Reader, upstream net.Conn) {
	_ = client.SetDeadline(time.Time{})
	defer p.untrack(upstream)
	if !p.track(upstream) {
		return
	}
	done := make(chan struct{}, 2)
	// half copies one way, counts it and half-closes dst.
	half := func(dst net.Conn, src io.Reader, count *atomic.Int64) {
		n, _ := io.Copy(dst, src)
		count.Add(n)
		if tc, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go half(upstream, clientR, &p.bytesUp)
	go half(client, upstream, &p.bytesIn)
	<-done
	<-done
}

// http serves CONNECT tunnels and absolute-form plain HTTP requests.
func (p *Proxy) http(c net.Conn, br *bufio.Reader) {
	req, err := http.ReadRequest(br)
	if err != nil {
		writeStatus(c, http.StatusBadRequest, "malformed proxy request")
		return
	}
	host, port, err := target(req)
	if err != nil {
		writeStatus(c, http.StatusBadRequest, err.Error())
		return
	}
	up, err := p.connect(host, port)
	if err != nil {
		writeStatus(c, denyStatus(err), err.Error())
		return
	}
	if req.Method == http.MethodConnect {
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			_ = up.Close()
			return
		}
		p.pipe(c, br, up)
		return
	}
	// Plain HTTP through the proxy: one request per connection.
	req.RequestURI = ""
	req.Header.Del("Proxy-Authorization")
	req.Header.Del("Proxy-Connection")
	req.Close = true
	req.Header.Set("Connection", "close")
	_ = up.SetDeadline(time.Now().Add(5 * time.Minute))
	if err := req.Write(up); err != nil {
		_ = up.Close()
		writeStatus(c, http.StatusBadGateway, "writing the request upstream failed")
		return
	}
	_ = c.SetDeadline(time.Time{})
	p.relay(c, up)
}

// target is where req goes: a CONNECT's host:port, or the host and port
// (default 80) of an absolute http:// URL; any other request is refused.
func target(req *http.Request) (string, int, error) {
	if req.Method == http.MethodConnect {
		return splitHostPort(req.Host)
	}
	if req.URL == nil || req.URL.Scheme != "http" || req.URL.Host == "" {
		return "", 0, errors.New("only CONNECT and absolute http:// requests are proxied")
	}
	host, port := req.URL.Hostname(), 80
	if ps := req.URL.Port(); ps != "" {
		var err error
		if port, err = parsePort(ps); err != nil {
			return "", 0, err
		}
	}
	return host, port, nil
}

// relay copies a plain HTTP response back; the client sends nothing more.
func (p *Proxy) relay(client, upstream net.Conn) {
	defer p.untrack(upstream)
	if !p.track(upstream) {
		return
	}
	n, _ := io.Copy(client, upstream)
	p.bytesIn.Add(n)
}

func denyStatus(err error) int {
	if errors.Is(err, ErrDenied) {
		return http.StatusForbidden
	}
	return http.StatusBadGateway
}

func writeStatus(c net.Conn, code int, msg string) {
	body := "portcullis egress: " + msg + "\n"
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, http.StatusText(code), len(body), body)
}

// splitHostPort parses "host:port" (port required).
func splitHostPort(hp string) (string, int, error) {
	h, ps, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, fmt.Errorf("target %q: %w", hp, err)
	}
	port, err := parsePort(ps)
	if err != nil {
		return "", 0, fmt.Errorf("target %q: %w", hp, err)
	}
	return h, port, nil
}

// SOCKS5 (RFC 1928) constants.
const (
	socksVersion      = 5
	socksNoAuth       = 0
	socksNoAcceptable = 0xff
	socksConnect      = 1
	atypIPv4          = 1
	atypDomain        = 3
	atypIPv6          = 4

	repSucceeded        = 0
	repNotAllowed       = 2
	repHostUnreachable  = 4
	repCmdNotSupported  = 7
	repAtypNotSupported = 8
)

func (p *Proxy) socks5(c net.Conn, br *bufio.Reader) {
	hdr := make([]byte, 2)
	if _, err := io.ReadFull(br, hdr); err != nil || hdr[0] != socksVersion {
		return
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return
	}
	ok := false
	for _, m := range methods {
		if m == socksNoAuth {
			ok = true
		}
	}
	if !ok {
		_, _ = c.Write([]byte{socksVersion, socksNoAcceptable})
		return
	}
	if _, err := c.Write([]byte{socksVersion, socksNoAuth}); err != nil {
		return
	}
	req := make([]byte, 4)
	if _, err := io.ReadFull(br, req); err != nil || req[0] != socksVersion {
		return
	}
	if req[1] != socksConnect {
		socksReply(c, repCmdNotSupported)
		return
	}
	var host string
	switch req[3] {
	case atypIPv4:
		b := make([]byte, 4)
		if _, err := io.ReadFull(br, b); err != nil {
			return
		}
		host = netip.AddrFrom4([4]byte(b)).String()
	case atypIPv6:
		b := make([]byte, 16)
		if _, err := io.ReadFull(br, b); err != nil {
			return
		}
		host = netip.AddrFrom16([16]byte(b)).String()
	case atypDomain:
		n, err := br.ReadByte()
		if err != nil {
			return
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			return
		}
		host = string(b)
	default:
		socksReply(c, repAtypNotSupported)
		return
	}
	pb := make([]byte, 2)
	if _, err := io.ReadFull(br, pb); err != nil {
		return
	}
	port := int(binary.BigEndian.Uint16(pb))
	up, err := p.connect(host, port)
	if err != nil {
		switch {
		case errors.Is(err, ErrDenied):
			socksReply(c, repNotAllowed)
		default:
			socksReply(c, repHostUnreachable)
		}
		return
	}
	if err := socksReply(c, repSucceeded); err != nil {
		_ = up.Close()
		return
	}
	p.pipe(c, br, up)
}

// socksReply answers with rep and a zero IPv4 bind address.
func socksReply(c net.Conn, rep byte) error {
	_, err := c.Write([]byte{socksVersion, rep, 0, atypIPv4, 0, 0, 0, 0, 0, 0})
	return err
}
