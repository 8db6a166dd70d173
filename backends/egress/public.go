package egress

import "net/netip"

// Special reports whether ip is not a public unicast address: private,
// shared, loopback, link-local (cloud metadata included), documentation,
// multicast, reserved, or a translation range that can embed one of those.
// Tools that dial on the gateway's own network (http.get) use it to refuse
// what the egress proxy refuses.
func Special(ip netip.Addr) bool { return special(ip) }

// CIDRAllows reports whether a CIDR (or single-IP) entry of the list covers
// ip:port. Name entries never do: a name is checked before resolution.
func (a *Allowlist) CIDRAllows(ip netip.Addr, port int) bool {
	return a.cidrAllowed(ip.Unmap(), port)
}

// metadataAddrs are the cloud instance-metadata endpoints: credentials
// behind a plain GET, so no grant ever opens them to a tool.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"),
	netip.MustParseAddr("169.254.170.2"),
	netip.MustParseAddr("fd00:ec2::254"),
}

// Metadata reports whether ip is a cloud instance-metadata address, or an
// IPv6 translation form carrying one (NAT64 64:ff9b::169.254.169.254, 6to4
// 2002:a9fe:a9fe::, ::169.254.169.254 ...): a grant of the translation
// range never opens the metadata service behind it.
func Metadata(ip netip.Addr) bool {
	ip = ip.Unmap().WithZone("")
	for _, m := range metadataAddrs {
		if ip == m {
			return true
		}
	}
	for _, v4 := range embeddedV4(ip) {
		if Metadata(v4) {
			return true
		}
	}
	return false
}

// Reachable reports whether a tool may dial ip:port under this list: never
// a metadata address; a non-public address only where a CIDR entry grants
// it; and an IPv6 translation form (NAT64, 6to4, Teredo, IPv4-compatible,
// SIIT) only if every IPv4 address it carries is public or granted itself,
// so that granting an IPv6-only network's NAT64 prefix does not open
// 10.0.0.0/8 or 127.0.0.1 through the translator.
func (a *Allowlist) Reachable(ip netip.Addr, port int) bool {
	ip = ip.Unmap().WithZone("")
	if Metadata(ip) || (special(ip) && !a.cidrAllowed(ip, port)) {
		return false
	}
	for _, v4 := range embeddedV4(ip) {
		if special(v4) && !a.cidrAllowed(v4, port) {
			return false
		}
	}
	return true
}

// Translation ranges whose addresses carry an IPv4 address.
var (
	v4Compatible = netip.MustParsePrefix("::/96")           // deprecated ::a.b.c.d (RFC 4291)
	v4Translated = netip.MustParsePrefix("::ffff:0:0:0/96") // SIIT ::ffff:0:a.b.c.d (RFC 2765)
	nat64        = netip.MustParsePrefix("64:ff9b::/96")    // RFC 6052
	nat64Local   = netip.MustParsePrefix("64:ff9b:1::/48")  // RFC 8215, read as a /96 network
	sixToFour    = netip.MustParsePrefix("2002::/16")       // RFC 3056: 2002:AABB:CCDD::
	teredo       = netip.MustParsePrefix("2001::/32")       // RFC 4380: server, then client inverted
)

// embeddedV4 returns the IPv4 addresses an IPv6 translation form carries
// (none for other addresses).
func embeddedV4(ip netip.Addr) []netip.Addr {
	if !ip.Is6() || ip.Is4In6() {
		return nil
	}
	b := ip.As16()
	v4 := func(o int, inv byte) netip.Addr {
		return netip.AddrFrom4([4]byte{b[o] ^ inv, b[o+1] ^ inv, b[o+2] ^ inv, b[o+3] ^ inv})
	}
	switch {
	case v4Compatible.Contains(ip), v4Translated.Contains(ip), nat64.Contains(ip), nat64Local.Contains(ip):
		return []netip.Addr{v4(12, 0)}
	case sixToFour.Contains(ip):
		return []netip.Addr{v4(2, 0)}
	case teredo.Contains(ip):
		return []netip.Addr{v4(4, 0), v4(12, 0xff)}
	}
	return nil
}
