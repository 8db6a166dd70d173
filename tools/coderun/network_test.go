package coderun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/backends"
	"github.com/portcullis/portcullis/backends/bwrap"
	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/wire"
)

// loopbackServer answers "REACHED <name>" on 127.0.0.1 and returns its port.
func loopbackServer(t *testing.T, name string) int {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	must(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "REACHED "+name) }), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// TestAllowlistNetwork: under posture allowlist on bubblewrap, Deno's only
// way out is the per-call egress proxy (HTTP_PROXY in a fresh network
// namespace). A loopback server the policy grants (name plus CIDR, the
// proxy refuses loopback without a CIDR) is reached through the proxy; a
// port the CIDR does not cover passes Deno's --allow-net (the name entry
// has no port) but is refused by the proxy and recorded in the result's
// network account; a host Deno was not given (an IP literal: Deno has no
// CIDRs) is refused by Deno itself and never reaches the proxy.
func TestAllowlistNetwork(t *testing.T) {
	t.Parallel()
	deno := denoPath(t)
	r, ok := runners(t)["bwrap"]
	if !ok {
		t.Skip("posture allowlist is enforced by the bwrap runner's network namespace; bwrap is unusable here")
	}
	if os.Geteuid() != 0 {
		if os.Getenv("PORTCULLIS_REQUIRE_BWRAP") == "1" {
			t.Fatal("posture allowlist needs root (per-call network namespace)")
		}
		t.Skip("posture allowlist needs root (per-call network namespace)")
	}
	allowed, other := loopbackServer(t, "allowed"), loopbackServer(t, "other")
	e := newEnv(t)
	d := e.decision()
	d.Network = wire.Network{Posture: wire.PostureAllowlist, Allow: []string{"localhost", fmt.Sprintf("127.0.0.0/8:%d", allowed)}}
	code := fmt.Sprintf(`
const get = async (u: string) => {
  try { const r = await fetch(u); return r.status + " " + (await r.text()).trim(); }
  catch (err) { console.error(u, String(err), String((err as any).cause)); return "refused " + (err as Error).name; }
};
console.log("allowed:", await get("http://localhost:%[1]d/"));
console.log("other-port:", await get("http://localhost:%[2]d/"));
console.log("ip-literal:", await get("http://127.0.0.1:%[2]d/"));
console.log("other-host:", await get("http://example.com/"));
`, allowed, other)
	res, data := exec(t, New(Options{Runner: r, Deno: deno}), d, nil, map[string]any{"code": code})
	if !res.Output.Success {
		t.Fatalf("%+v\nstdout %q\nstderr %q", res.Output.Error, data.Output, data.Stderr)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(data.Output), "\n") {
		k, v, _ := strings.Cut(l, ": ")
		lines[k] = v
	}
	if got := lines["allowed"]; got != "200 REACHED allowed" {
		t.Errorf("allowed server: %q (stderr %q)", got, data.Stderr)
	}
	// Deno reports the proxy's refusal as a failed fetch (TypeError), not
	// NotCapable: its own permission let the request through to the proxy.
	if got := lines["other-port"]; got != "refused TypeError" {
		t.Errorf("port outside the CIDR entry: %q, want the proxy's refusal", got)
	}
	for _, k := range []string{"ip-literal", "other-host"} {
		if got := lines[k]; got != "refused NotCapable" {
			t.Errorf("%s: %q, want Deno's NotCapable", k, got)
		}
	}
	if strings.Contains(data.Output, "REACHED other") {
		t.Errorf("reached the server not on the list: %q", data.Output)
	}
	n := res.Network
	if n == nil {
		t.Fatalf("no network account in the result")
	}
	okTarget, refTarget := fmt.Sprintf("localhost:%d", allowed), fmt.Sprintf("localhost:%d", other)
	if len(n.Allowed) != 1 || n.Allowed[0] != okTarget || len(n.Refused) != 1 || n.Refused[0] != refTarget || n.Denials[refTarget] == "" {
		t.Errorf("network account %+v, want allowed [%s] refused [%s]", n, okTarget, refTarget)
	}
	if res.Output.Metadata["network"] == nil {
		t.Errorf("metadata lacks network: %+v", res.Output.Metadata)
	}
}

// TestOutputCap: console output beyond max_output_bytes (stdout or stderr)
// stops the run and fails the call with too_large, keeping what came
// before the cap; under the cap nothing is flagged; the policy's cap wins
// over a larger request. TestCapsStopTheRun checks the kill itself.
func TestOutputCap(t *testing.T) {
	eachRunner(t, func(t *testing.T, r backends.Runner, deno string) {
		e := newEnv(t)
		tool := New(Options{Runner: r, Deno: deno})
		for _, stream := range []string{"log", "error"} {
			res, data := exec(t, tool, e.decision(), nil, map[string]any{"max_output_bytes": 1024, "code": `
console.` + stream + `("a".repeat(5000));
export const result = 1;`})
			if res.Output.Success || res.Output.Error == nil || res.Output.Error.Code != wire.CodeTooLarge || res.Output.Error.Details["field"] != "max_output_bytes" {
				t.Fatalf("%s: %+v", stream, res.Output.Error)
			}
			out, cut := data.Output, data.OutputTruncated
			if stream == "error" {
				out, cut = data.Stderr, data.StderrTruncated
			}
			if !cut || len(out) != 1024 || strings.Trim(out, "a") != "" || string(data.Result) != "null" {
				t.Errorf("%s: truncated %v, %d bytes, result %s", stream, cut, len(out), data.Result)
			}
		}
		// Under the cap: nothing flagged.
		res, data := exec(t, tool, e.decision(), nil, map[string]any{"max_output_bytes": 1024, "code": `console.log("short"); export const result = 1;`})
		if !res.Output.Success || data.OutputTruncated || data.StderrTruncated || data.ResultTruncated || data.Output != "short\n" || string(data.Result) != "1" {
			t.Errorf("under the cap: %+v", data)
		}
		// The policy's cap wins over a larger request.
		d := e.decision()
		d.Limits.MaxOutputBytes = 2048
		res, data = exec(t, tool, d, nil, map[string]any{"max_output_bytes": 100000, "code": `console.log("b".repeat(10000));`})
		if res.Output.Success || !data.OutputTruncated || len(data.Output) != 2048 {
			t.Errorf("policy cap: success %v truncated %v, %d bytes", res.Output.Success, data.OutputTruncated, len(data.Output))
		}
	})
}

// namedRunner is a Runner that only has a name (argv tests).
type namedRunner string

func (n namedRunner) Name() string { return string(n) }
func (n namedRunner) Run(context.Context, sandbox.Spec) (sandbox.Result, error) {
	return sandbox.Result{}, errors.New("not a runner")
}

// TestAllowlistArgvProxy: Deno 2 checks its net permission for the proxy
// address as well, so under bwrap (where HTTP_PROXY points at the call's
// own proxy) --allow-net carries bwrap.ProxyAddr; under any other runner
// that address would be the host's, and is never granted.
func TestAllowlistArgvProxy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for runner, want := range map[backends.Runner]bool{bwrap.New(bwrap.Options{}): true, namedRunner("process"): false} {
		tool := New(Options{Runner: runner, Deno: "/x/deno"})
		c, err := tool.Prepare(context.Background(), json.RawMessage(`{"code":"1"}`))
		must(t, err)
		d := e.decision()
		d.Network = wire.Network{Posture: wire.PostureAllowlist, Allow: []string{"api.example.com:443"}}
		scope, err := c.Enforce(context.Background(), d)
		must(t, err)
		argv := strings.Join(c.(*call).argv("/x/deno", "/run", "/run/req", "/run/resp", scope), " ")
		if got := strings.Contains(argv, "--allow-net=api.example.com:443,"+bwrap.ProxyAddr+" "); got != want {
			t.Errorf("%s: proxy address granted %v, want %v:\n%s", runner.Name(), got, want, argv)
		}
		if !want && strings.Contains(argv, bwrap.ProxyAddr) {
			t.Errorf("%s grants the proxy address: %s", runner.Name(), argv)
		}
	}
}
