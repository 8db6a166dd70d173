// Package backends is where tool calls run: the runners (process, bwrap,
// seatbelt) and what they share (sandbox specs and profiles, cgroups, the
// egress proxy). "Backend" in this project always means a runner; the
// tools that build runs (Exec, code.run, ...) live under tools/.
//
// Runner is declared here, once, so that the tools that start programs and
// the binary that chooses a runner speak of the same thing, and so that no
// tool imports a concrete runner to learn how it behaves: what a tool needs
// to know of a runner (how it bounds memory, where its egress proxy
// listens) it asks through the small optional interfaces below.
package backends

import (
	"context"

	"github.com/portcullis/portcullis/backends/sandbox"
)

// Runner runs one sandbox.Spec. Run's error means the program could not be
// started at all (a *wire.Error such as sandbox_unavailable, or a cause the
// tool maps to one); a program that started and failed is a Result.
type Runner interface {
	// Name is the backend recorded in the enforced scope: "process",
	// "bwrap", "seatbelt", or "none" for a refuser.
	Name() string
	Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error)
}

// MemoryLimiter is a runner that says how it bounds a call's memory_bytes
// (wire.MemoryLimitCgroup or wire.MemoryLimitRlimitData).
type MemoryLimiter interface {
	MemoryLimit() string
}

// MemoryLimitOf is how r will enforce a call's memory_bytes, recorded in
// the enforced scope; the runner then applies exactly that or refuses the
// call. A runner that does not say leaves it "" (its own choice).
func MemoryLimitOf(r Runner) string {
	if m, ok := r.(MemoryLimiter); ok {
		return m.MemoryLimit()
	}
	return ""
}

// EgressProxy is a runner whose calls reach the network only through a
// per-call proxy inside the call's own network namespace (bwrap). A program
// that checks its own net permission for the proxy's address (Deno) must
// be allowed that address, and only under such a runner: under any other
// it would be the host's port.
type EgressProxy interface {
	ProxyAddr() string
}

// ProxyAddrOf is the address of r's in-namespace egress proxy, or "" when
// r has none.
func ProxyAddrOf(r Runner) string {
	if p, ok := r.(EgressProxy); ok {
		return p.ProxyAddr()
	}
	return ""
}
