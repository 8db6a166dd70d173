// Package egress is the gateway-owned way out of a sandbox whose network
// posture is "allowlist": an HTTP CONNECT and SOCKS5 proxy (one listener,
// both protocols) that checks host:port against the call's allowlist before
// any DNS lookup, resolves only allowed names, refuses private, loopback,
// link-local and metadata addresses unless a CIDR entry grants them, and
// dials exactly the address it checked, so DNS rebinding between check and
// connect is impossible.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Resolver looks up names; *net.Resolver satisfies it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// ErrDenied marks a target the allowlist refuses.
var ErrDenied = errors.New("egress: not allowed")

// rule is one allowlist entry.
type rule struct {
	host   string       // exact name, lower case, no trailing dot
	suffix string       // "*.example.com" -> ".example.com"
	prefix netip.Prefix // CIDR (or a single IP)
	port   int          // 0: any
}

// Allowlist is a parsed network.allow list. Entries:
//
//	api.github.com          exact name, any port
//	api.github.com:443      exact name and port
//	*.example.com[:port]    any name strictly below example.com
//	10.0.0.0/8[:port]       addresses in the CIDR (IP literals, and
//	1.2.3.4[:port]          resolved addresses of allowed names)
//	[2001:db8::1]:443       IPv6 literal with port
//
// A name entry never allows an IP literal, and a CIDR entry never allows a
// name on its own: names are checked before resolution, CIDRs after.
type Allowlist struct {
	rules []rule
}

// ParseAllowlist parses entries; any malformed entry fails the whole list,
// so that a typo never widens or silently narrows the grant.
func ParseAllowlist(entries []string) (*Allowlist, error) {
	a := &Allowlist{}
	for _, e := range entries {
		r, err := parseRule(strings.TrimSpace(e))
		if err != nil {
			return nil, fmt.Errorf("egress: allowlist entry %q: %w", e, err)
		}
		a.rules = append(a.rules, r)
	}
	return a, nil
}

func parseRule(e string) (rule, error) {
	if e == "" {
		return rule{}, errors.New("empty")
	}
	var r rule
	hostPart := e
	// Port: "[v6]:p", "cidr:p", "host:p"; a bare v6 literal has colons but no port.
	if strings.HasPrefix(e, "[") {
		end := strings.IndexByte(e, ']')
		if end < 0 {
			return rule{}, errors.New("missing ]")
		}
		hostPart = e[1:end]
		rest := e[end+1:]
		if rest != "" {
			if !strings.HasPrefix(rest, ":") {
				return rule{}, errors.New("junk after ]")
			}
			p, err := parsePort(rest[1:])
			if err != nil {
				return rule{}, err
			}
			r.port = p
		}
	} else if strings.Count(e, ":") == 1 {
		h, p, _ := strings.Cut(e, ":")
		port, err := parsePort(p)
		if err != nil {
			return rule{}, err
		}
		hostPart, r.port = h, port
	}
	if strings.Contains(hostPart, "/") {
		pfx, err := netip.ParsePrefix(hostPart)
		if err != nil {
			return rule{}, fmt.Errorf("bad CIDR: %w", err)
		}
		r.prefix = unmapPrefix(pfx.Masked())
		return r, nil
	}
	if ip, err := netip.ParseAddr(hostPart); err == nil {
		ip = ip.Unmap()
		r.prefix = netip.PrefixFrom(ip, ip.BitLen())
		return r, nil
	}
	name := normalizeName(hostPart)
	if s, ok := strings.CutPrefix(name, "*."); ok {
		if !ValidName(s) || !strings.Contains(s, ".") {
			return rule{}, errors.New("wildcard needs a domain with at least two labels, e.g. *.example.com")
		}
		r.suffix = "." + s
		return r, nil
	}
	if !ValidName(name) {
		return rule{}, errors.New("not a host name, IP, CIDR or *.domain")
	}
	r.host = name
	return r, nil
}

func unmapPrefix(p netip.Prefix) netip.Prefix {
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p
}

func parsePort(s string) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 {
		return 0, fmt.Errorf("bad port %q", s)
	}
	return p, nil
}

// normalizeName lower-cases a name and drops one trailing dot.
func normalizeName(h string) string {
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// ValidName accepts LDH labels (and '_', seen in real names) only, so that
// nothing odd (spaces, '%', NULs, '@') reaches the resolver: the names the
// allowlist accepts, and the only names http.get will resolve.
func ValidName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

func portOK(rulePort, port int) bool { return rulePort == 0 || rulePort == port }

// nameAllowed checks a (normalized) name against the name rules.
func (a *Allowlist) nameAllowed(name string, port int) bool {
	for _, r := range a.rules {
		if !portOK(r.port, port) {
			continue
		}
		if r.host != "" && r.host == name {
			return true
		}
		if r.suffix != "" && strings.HasSuffix(name, r.suffix) && len(name) > len(r.suffix) {
			return true
		}
	}
	return false
}

// cidrAllowed reports whether a CIDR rule covers ip:port.
func (a *Allowlist) cidrAllowed(ip netip.Addr, port int) bool {
	for _, r := range a.rules {
		if r.prefix.IsValid() && portOK(r.port, port) && r.prefix.Contains(ip) {
			return true
		}
	}
	return false
}

// Resolve decides a target: it returns the one address to dial, or an
// error wrapping ErrDenied that says why. Names are checked before any
// lookup; only allowed names are resolved; every resolved address must be
// public unless a CIDR grants it. The returned address is the one that was
// checked: the caller dials it, never the name.
func (a *Allowlist) Resolve(ctx context.Context, res Resolver, host string, port int) (netip.AddrPort, error) {
	if port < 1 || port > 65535 {
		return netip.AddrPort{}, fmt.Errorf("%w: port %d", ErrDenied, port)
	}
	h := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if ip, err := netip.ParseAddr(h); err == nil {
		if ip.Zone() != "" {
			return netip.AddrPort{}, fmt.Errorf("%w: zoned address %s", ErrDenied, host)
		}
		ip = ip.Unmap()
		if Metadata(ip) {
			return netip.AddrPort{}, fmt.Errorf("%w: %s is a cloud metadata address, never reachable from a tool", ErrDenied, ip)
		}
		if !a.cidrAllowed(ip, port) {
			return netip.AddrPort{}, fmt.Errorf("%w: %s is not in an allowed CIDR", ErrDenied, net.JoinHostPort(ip.String(), strconv.Itoa(port)))
		}
		if !a.Reachable(ip, port) {
			return netip.AddrPort{}, fmt.Errorf("%w: %s carries an IPv4 address that no CIDR entry grants", ErrDenied, ip)
		}
		return netip.AddrPortFrom(ip, uint16(port)), nil
	}
	name := normalizeName(h)
	if !ValidName(name) {
		return netip.AddrPort{}, fmt.Errorf("%w: %q is not a valid host name", ErrDenied, host)
	}
	if !a.nameAllowed(name, port) {
		return netip.AddrPort{}, fmt.Errorf("%w: %s:%d is not on the allowlist", ErrDenied, name, port)
	}
	if res == nil {
		res = net.DefaultResolver
	}
	addrs, err := res.LookupNetIP(ctx, "ip", name)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("egress: resolving %s: %w", name, err)
	}
	var refused []string
	for _, ip := range addrs {
		ip = ip.Unmap().WithZone("")
		if !a.Reachable(ip, port) {
			refused = append(refused, ip.String())
			continue
		}
		return netip.AddrPortFrom(ip, uint16(port)), nil
	}
	return netip.AddrPort{}, fmt.Errorf("%w: %s resolves only to non-public addresses %v that no CIDR entry grants", ErrDenied, name, refused)
}

// specialPrefixes are not the public internet: private, shared, loopback,
// link-local (cloud metadata 169.254.169.254 and fd00:ec2::254 included),
// documentation, benchmarking, multicast, reserved, and translation ranges
// that can embed one of those.
var specialPrefixes = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
		"172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16",
		"198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
		"::/96", "::ffff:0:0/96", "::ffff:0:0:0/96", "64:ff9b::/96", "64:ff9b:1::/48", "100::/64",
		"2001::/23", "2001:db8::/32", "2002::/16", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8",
		"fd00:ec2::254/128",
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// special reports whether ip is not a public unicast address.
func special(ip netip.Addr) bool {
	ip = ip.Unmap()
	if !ip.IsGlobalUnicast() {
		return true
	}
	for _, p := range specialPrefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}
