package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
)

// fakeResolver answers from a table and records every name it was asked.
type fakeResolver struct {
	mu    sync.Mutex
	table map[string][]netip.Addr
	asked []string
}

func (f *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, host)
	if a, ok := f.table[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, x := range s {
		out = append(out, netip.MustParseAddr(x))
	}
	return out
}

func TestResolve(t *testing.T) {
	t.Parallel()
	al, err := ParseAllowlist([]string{"api.github.com:443", "*.example.org", "10.1.0.0/16:8080", "203.0.113.7", "[2001:db8::1]:443", "internal.corp:443", "10.9.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	res := &fakeResolver{table: map[string][]netip.Addr{
		"api.github.com":    addrs("140.82.112.6"),
		"a.b.example.org":   addrs("93.184.216.34"),
		"meta.example.org":  addrs("169.254.169.254"),
		"mixed.example.org": addrs("127.0.0.1", "93.184.216.35"),
		"v6map.example.org": addrs("::ffff:10.0.0.1"),
		"internal.corp":     addrs("10.9.1.2"),
	}}
	// A list that grants the whole link-local range still never opens the
	// cloud metadata endpoints.
	wide, err := ParseAllowlist([]string{"169.254.0.0/16", "fd00::/8", "*.example.org"})
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"169.254.169.254", "169.254.170.2", "[fd00:ec2::254]", "meta.example.org"} {
		if got, err := wide.Resolve(context.Background(), res, host, 80); err == nil || !errors.Is(err, ErrDenied) {
			t.Errorf("wide CIDR: %s allowed (%s, %v); metadata must never be reachable", host, got, err)
		}
	}
	if got, err := wide.Resolve(context.Background(), res, "169.254.1.1", 80); err != nil {
		t.Errorf("wide CIDR: 169.254.1.1 refused (%s, %v); the grant itself must still work", got, err)
	}
	tests := []struct {
		host   string
		port   int
		want   string // dialed address, or "" for a refusal
		lookup bool   // whether DNS may be consulted
	}{
		{"api.github.com", 443, "140.82.112.6:443", true},
		{"API.GitHub.com.", 443, "140.82.112.6:443", true},
		{"api.github.com", 80, "", false}, // wrong port: refused before DNS
		{"evil.com", 443, "", false},      // not listed: refused before DNS
		{"example.org", 443, "", false},   // *.suffix does not match the apex
		{"a.b.example.org", 443, "93.184.216.34:443", true},
		{"xexample.org", 443, "", false},
		{"meta.example.org", 80, "", true},                    // metadata address refused
		{"mixed.example.org", 443, "93.184.216.35:443", true}, // loopback skipped, public used
		{"v6map.example.org", 443, "", true},                  // mapped private refused
		{"internal.corp", 443, "10.9.1.2:443", true},          // private granted by a CIDR
		{"10.1.2.3", 8080, "10.1.2.3:8080", false},
		{"10.1.2.3", 22, "", false},
		{"::ffff:10.1.2.3", 8080, "10.1.2.3:8080", false},
		{"203.0.113.7", 9999, "203.0.113.7:9999", false},
		{"[2001:db8::1]", 443, "[2001:db8::1]:443", false},
		{"127.0.0.1", 80, "", false},
		{"169.254.169.254", 80, "", false},
		{"bad name", 443, "", false},
		{"api.github.com", 0, "", false},
	}
	for _, tt := range tests {
		res.mu.Lock()
		res.asked = nil
		res.mu.Unlock()
		got, err := al.Resolve(context.Background(), res, tt.host, tt.port)
		if tt.want == "" {
			if err == nil {
				t.Errorf("%s:%d allowed (%s), want refused", tt.host, tt.port, got)
			} else if !errors.Is(err, ErrDenied) {
				t.Errorf("%s:%d: error %v does not wrap ErrDenied", tt.host, tt.port, err)
			}
		} else if err != nil || got.String() != tt.want {
			t.Errorf("%s:%d = %s, %v; want %s", tt.host, tt.port, got, err, tt.want)
		}
		res.mu.Lock()
		if !tt.lookup && len(res.asked) > 0 {
			t.Errorf("%s:%d: DNS consulted for %v before the allowlist allowed it", tt.host, tt.port, res.asked)
		}
		res.mu.Unlock()
	}
}

func TestParseAllowlistRejects(t *testing.T) {
	t.Parallel()
	for _, e := range []string{"", "*.com", "host:0", "host:99999", "10.0.0.0/33", "a b", "[::1", "*", "ex ample.com:443"} {
		if _, err := ParseAllowlist([]string{e}); err == nil {
			t.Errorf("entry %q accepted", e)
		}
	}
}

// startProxy serves a proxy whose dialer records what it dials and sends
// every connection to target.
func startProxy(t *testing.T, allow []string, res Resolver, target string) (*Proxy, string, *[]string) {
	t.Helper()
	al, err := ParseAllowlist(allow)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	dialed := &[]string{}
	p := New(Options{Allow: al, Resolver: res, Dial: func(ctx context.Context, a netip.AddrPort) (net.Conn, error) {
		mu.Lock()
		*dialed = append(*dialed, a.String())
		mu.Unlock()
		return (&net.Dialer{}).DialContext(ctx, "tcp", target)
	}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(ln)
	t.Cleanup(func() { p.Close() })
	return p, ln.Addr().String(), dialed
}

// TestProxyPinsCheckedAddress: CONNECT, plain HTTP and SOCKS5 all dial the
// address the allowlist checked, and refusals are recorded.
func TestProxyPinsCheckedAddress(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "upstream ok") }))
	defer srv.Close()
	res := &fakeResolver{table: map[string][]netip.Addr{"pinned.test": addrs("93.184.216.34")}}
	p, addr, dialed := startProxy(t, []string{"pinned.test:80"}, res, srv.Listener.Addr().String())

	// CONNECT
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT pinned.test:80 HTTP/1.1\r\nHost: pinned.test:80\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: pinned.test\r\nConnection: close\r\n\r\n")
	body, _ := io.ReadAll(br)
	c.Close()
	if !strings.Contains(string(body), "upstream ok") {
		t.Errorf("tunnel body %q", body)
	}

	// Plain HTTP, absolute form.
	c, _ = net.Dial("tcp", addr)
	fmt.Fprintf(c, "GET http://pinned.test/ HTTP/1.1\r\nHost: pinned.test\r\n\r\n")
	body, _ = io.ReadAll(c)
	c.Close()
	if !strings.Contains(string(body), "upstream ok") {
		t.Errorf("plain proxy body %q", body)
	}

	// Refused CONNECT.
	c, _ = net.Dial("tcp", addr)
	fmt.Fprintf(c, "CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n")
	resp, err = http.ReadResponse(bufio.NewReader(c), nil)
	c.Close()
	if err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("refused CONNECT: %v %v", resp, err)
	}

	// SOCKS5 with a domain, allowed then refused.
	for _, tc := range []struct {
		host string
		rep  byte
	}{{"pinned.test", 0}, {"evil.test", 2}} {
		c, _ = net.Dial("tcp", addr)
		c.Write([]byte{5, 1, 0})
		hs := make([]byte, 2)
		io.ReadFull(c, hs)
		req := append([]byte{5, 1, 0, 3, byte(len(tc.host))}, tc.host...)
		req = append(req, 0, 80)
		c.Write(req)
		rep := make([]byte, 10)
		if _, err := io.ReadFull(c, rep); err != nil || rep[1] != tc.rep {
			t.Errorf("SOCKS5 %s: reply %v %v, want rep %d", tc.host, rep, err, tc.rep)
		}
		c.Close()
	}

	p.Close()
	for _, d := range *dialed {
		if d != "93.184.216.34:80" {
			t.Errorf("dialed %s, want only the checked address", d)
		}
	}
	st := p.Stats()
	if st.Connections != 5 || len(st.Allowed) != 1 || st.Allowed[0] != "pinned.test:80" {
		t.Errorf("stats %+v", st)
	}
	for _, r := range []string{"evil.test:443", "evil.test:80"} {
		if _, ok := st.Denials[r]; !ok {
			t.Errorf("refusal of %s not recorded: %+v", r, st)
		}
	}
	for _, q := range res.asked {
		if q != "pinned.test" {
			t.Errorf("resolver asked for %q, a name the allowlist never allowed", q)
		}
	}
}

// TestEmbeddedIPv4 is the IPv6 forms that carry an IPv4 address: the
// deprecated IPv4-compatible ::a.b.c.d, SIIT's ::ffff:0:a.b.c.d, NAT64
// (64:ff9b::/96), 6to4 (2002::/16) and Teredo. A private or metadata IPv4
// inside one is refused like the IPv4 itself, also where a CIDR entry
// grants the IPv6 range (an IPv6-only network granting its NAT64 prefix):
// only a grant of the IPv4 itself opens it.
func TestEmbeddedIPv4(t *testing.T) {
	t.Parallel()
	nat64, err := ParseAllowlist([]string{"64:ff9b::/96", "64:ff9b:1::/48", "2002::/16", "2001::/32", "::/96", "::ffff:0:0:0/96", "*.example.org", "10.5.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	res := &fakeResolver{table: map[string][]netip.Addr{
		"compat.example.org": addrs("::127.0.0.1"),
		"nat64.example.org":  addrs("64:ff9b::a9fe:a9fe"),
		"public.example.org": addrs("64:ff9b::8.8.8.8"),
	}}
	// Without any grant, a name resolving to ::127.0.0.1 is no way in.
	plain, err := ParseAllowlist([]string{"*.example.org"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := plain.Resolve(context.Background(), res, "compat.example.org", 80); !errors.Is(err, ErrDenied) {
		t.Errorf("compat.example.org (::127.0.0.1) = %s, %v; want refused with ErrDenied", got, err)
	}
	for _, tc := range []struct {
		host     string
		port     int
		ok       bool
		metadata bool
	}{
		{"::127.0.0.1", 80, false, false},
		{"::169.254.169.254", 80, false, true},
		{"::ffff:0:127.0.0.1", 80, false, false},
		{"::ffff:0:169.254.169.254", 80, false, true},
		{"64:ff9b::127.0.0.1", 80, false, false},
		{"64:ff9b::169.254.169.254", 80, false, true},
		{"64:ff9b::169.254.170.2", 80, false, true},
		{"64:ff9b::10.0.0.1", 80, false, false},
		{"64:ff9b::10.5.0.1", 80, true, false}, // the IPv4 itself is granted
		{"64:ff9b:1:2::169.254.169.254", 80, false, true},
		{"64:ff9b::8.8.8.8", 80, true, false}, // the grant itself still works
		{"2002:7f00:1::1", 80, false, false},
		{"2002:a9fe:a9fe::1", 80, false, true},
		{"2002:808:808::1", 80, true, false},
		// Teredo: the client's IPv4 is the last 32 bits inverted, the
		// server's bits 32-63.
		{"2001:0:a9fe:a9fe::1", 80, false, true},
		{"2001:0:808:808:0:0:5601:5601", 80, false, true},  // client ^ 0xffffffff = 169.254.169.254
		{"2001:0:808:808:0:0:80ff:fffe", 80, false, false}, // client 127.0.0.1
		{"compat.example.org", 80, false, false},
		{"nat64.example.org", 80, false, true},
		{"public.example.org", 80, true, false},
	} {
		host := tc.host
		if ip, err := netip.ParseAddr(host); err == nil {
			if Metadata(ip) != tc.metadata {
				t.Errorf("Metadata(%s) = %v, want %v", ip, !tc.metadata, tc.metadata)
			}
			if !Special(ip) {
				t.Errorf("Special(%s) = false: an IPv6 form carrying an IPv4 is never the public internet on its own", ip)
			}
			host = "[" + host + "]"
		}
		got, err := nat64.Resolve(context.Background(), res, host, tc.port)
		if tc.ok && err != nil {
			t.Errorf("%s:%d refused (%v), want allowed", host, tc.port, err)
		}
		if !tc.ok && (err == nil || !errors.Is(err, ErrDenied)) {
			t.Errorf("%s:%d = %s, %v; want refused with ErrDenied", host, tc.port, got, err)
		}
	}
}
