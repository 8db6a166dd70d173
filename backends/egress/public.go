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

// Metadata reports whether ip is a cloud instance-metadata address.
func Metadata(ip netip.Addr) bool {
	ip = ip.Unmap().WithZone("")
	for _, m := range metadataAddrs {
		if ip == m {
			return true
		}
	}
	return false
}
