package httpget

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

// TestRedirectHopsAreDecidedByPolicy: every hop goes back to the pipeline
// as its own http.get (follow_redirects false); a hop the policy denies
// ends the chain with the hop's code, though the network posture alone
// would have allowed it (the old in-tool check did).
func TestRedirectHopsAreDecidedByPolicy(t *testing.T) {
	t.Parallel()
	s := server(t, false)
	p := port(t, s)
	tool := New(Options{Resolver: newResolver()})
	grant := allow("allowlist", "svc.test:"+p, "example.com:"+p, "127.0.0.0/8:"+p)
	first := "http://svc.test:" + p + "/redirect?to=" + url.QueryEscape("http://example.com:"+p+"/redirect?to=/hello")
	c, err := prepare(t, tool, map[string]any{"url": first, "headers": map[string]string{"accept": "text/plain"}})
	if err != nil {
		t.Fatal(err)
	}
	scope, err := c.Enforce(context.Background(), grant)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("all hops allowed", func(t *testing.T) {
		h := &hopDispatcher{tool: tool, decide: func(string) wire.Decision { return grant }}
		res := c.Run(tools.WithDispatcher(context.Background(), h), scope)
		data, _ := res.Output.Data.(Data)
		if !res.Output.Success || data.Body == "" || len(data.Hops) != 2 || data.Hops[0].ReceiptID != "hop-1" || data.Hops[1].ReceiptID != "hop-2" {
			t.Fatalf("%+v %+v", res.Output, data)
		}
		if data.Hops[0].Status != 302 || data.Hops[1].Status != 200 || !strings.HasSuffix(data.URL, "/hello") || len(data.Redirects) != 2 {
			t.Errorf("hops %+v url %s redirects %v", data.Hops, data.URL, data.Redirects)
		}
		for _, in := range h.hops() {
			if in["follow_redirects"] != false || in["headers"].(map[string]any)["accept"] != "text/plain" {
				t.Errorf("hop input %v: want follow_redirects false and the caller's headers", in)
			}
		}
	})
	t.Run("policy denies the second hop", func(t *testing.T) {
		h := &hopDispatcher{tool: tool, decide: func(u string) wire.Decision {
			if strings.HasSuffix(u, ":"+p+"/hello") {
				return wire.Decision{Allow: false}
			}
			return grant
		}}
		res := c.Run(tools.WithDispatcher(context.Background(), h), scope)
		e := res.Output.Error
		if res.Output.Success || e == nil || e.Code != wire.CodePermissionDenied || res.Status != wire.StatusFailed {
			t.Fatalf("%s %+v", res.Status, res.Output)
		}
		if hops, _ := e.Details["hops"].([]Hop); len(hops) != 2 || hops[1].ReceiptID != "hop-2" || hops[1].Status != 0 || e.Details["hop_receipt_id"] != "hop-2" {
			t.Errorf("details %v", e.Details)
		}
		if len(h.hops()) != 2 || len(res.Network.Refused) != 1 || res.Network.Denials[res.Network.Refused[0]] == "" {
			t.Errorf("hops %v network %+v", h.hops(), res.Network)
		}
	})
	t.Run("no dispatcher: not followed", func(t *testing.T) {
		res := c.Run(context.Background(), scope)
		if res.Output.Success || res.Output.Error == nil || res.Output.Error.Code != wire.CodeNetworkDenied {
			t.Fatalf("%+v", res.Output)
		}
	})
	t.Run("follow_redirects false returns the 3xx", func(t *testing.T) {
		c, err := prepare(t, tool, map[string]any{"url": first, "follow_redirects": false})
		if err != nil {
			t.Fatal(err)
		}
		scope, err := c.Enforce(context.Background(), grant)
		if err != nil {
			t.Fatal(err)
		}
		h := &hopDispatcher{tool: tool, decide: func(string) wire.Decision { return grant }}
		res := c.Run(tools.WithDispatcher(context.Background(), h), scope)
		data, _ := res.Output.Data.(Data)
		if !res.Output.Success || data.Status != 302 || !strings.HasPrefix(data.Headers["location"], "http://example.com") || len(h.hops()) != 0 {
			t.Fatalf("%+v %+v", res.Output, data)
		}
	})
	t.Run("follow_redirects must be a boolean", func(t *testing.T) {
		_, err := prepare(t, tool, map[string]any{"url": first, "follow_redirects": "no"})
		if c, f := code(err); c != wire.CodeInvalidInput || f != "follow_redirects" {
			t.Fatalf("%v", err)
		}
	})
}

// TestDryRunResolvesNothing: Enforce in a dry run makes every check that
// needs no lookup and never asks the resolver, whatever the posture.
func TestDryRunResolvesNothing(t *testing.T) {
	t.Parallel()
	res := newResolver()
	tool := New(Options{Resolver: res})
	dry := tools.WithDryRun(context.Background())
	for _, tc := range []struct {
		name string
		url  string
		d    wire.Decision
		want wire.Code
	}{
		{"allowlisted name", "http://svc.test/x", allow("allowlist", "svc.test"), ""},
		{"unlisted name", "http://other.test/x", allow("allowlist", "svc.test"), wire.CodeNetworkDenied},
		{"full posture, any name", "http://exfil-abcdef.attacker.test/x", allow("full"), ""},
		{"full posture, private literal", "http://10.0.0.1/x", allow("full"), wire.CodeNetworkDenied},
		{"off", "http://svc.test/x", allow("off"), wire.CodeNetworkDenied},
	} {
		c, err := prepare(t, tool, map[string]any{"url": tc.url})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Enforce(dry, tc.d)
		if got, _ := code(err); got != tc.want {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		// A dry-run Enforce never leaves a call that could run.
		if r := c.Run(context.Background(), wire.Scope{Limits: wire.Limits{TimeoutS: 1, MaxOutputBytes: 10}}); r.Output.Error == nil || r.Output.Error.Code != wire.CodeInternal {
			t.Errorf("%s: a dry-run call ran: %+v", tc.name, r.Output)
		}
	}
	if l := res.lookups(); len(l) != 0 {
		t.Fatalf("a dry run resolved %v", l)
	}
}
