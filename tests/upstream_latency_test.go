package tests

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestUpstreamEchoLatency measures (PORTCULLIS_BENCH_UPSTREAM=1 only; it
// asserts no timing) the same MCP client, the official Go SDK's, calling
// server-everything's echo directly over Streamable HTTP and through the
// gateway's MCP endpoint, which fronts that same server, governed
// (validate, decide, receipt before and after). It logs p50 and p99 of
// each and the calls per second of one sequential client.
func TestUpstreamEchoLatency(t *testing.T) {
	if os.Getenv("PORTCULLIS_BENCH_UPSTREAM") != "1" {
		t.Skip("a measurement, not a test: PORTCULLIS_BENCH_UPSTREAM=1 runs it")
	}
	direct := startEverythingHTTP(t)

	d := upstreamDeployment(t, []string{"web.echo"}, nil,
		fmt.Sprintf("  - name: web\n    url: %q\n    allow_networks: [\"127.0.0.1/32\"]\n", direct))
	g := d.start(t)
	waitUpstream(t, g, "web", "ready")

	const n = 500
	measure := func(endpoint, key, tool string) (p50, p99 time.Duration, perSec float64) {
		hc := &http.Client{Transport: &bearer{key: key, next: http.DefaultTransport}}
		client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
		ctx := context.Background()
		sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, DisableStandaloneSSE: true}, nil)
		if err != nil {
			t.Fatalf("connect %s: %v", endpoint, err)
		}
		defer sess.Close()
		lat := make([]time.Duration, 0, n)
		start := time.Now()
		for i := 0; i < n+50; i++ {
			t0 := time.Now()
			res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"message": "bench"}})
			if err != nil || res.IsError {
				t.Fatalf("call %s: %v %+v", tool, err, res)
			}
			if i == 50 {
				start = time.Now()
			}
			if i >= 50 { // warm-up
				lat = append(lat, time.Since(t0))
			}
		}
		total := time.Since(start)
		slices.Sort(lat)
		return lat[len(lat)/2], lat[len(lat)*99/100], float64(n) / total.Seconds()
	}
	dp50, dp99, dps := measure(direct, "", "echo")
	gp50, gp99, gps := measure(g.baseURL+"/mcp", d.keys[agentFull], "web.echo")
	t.Logf("server-everything echo, %d sequential calls, one official Go SDK client:", n)
	t.Logf("  direct:  p50 %v  p99 %v  %.0f calls/s", dp50, dp99, dps)
	t.Logf("  gateway: p50 %v  p99 %v  %.0f calls/s  (p50 ratio %.2f)", gp50, gp99, gps, float64(gp50)/float64(dp50))
}

// bearer sets the Authorization header (none when key is empty).
type bearer struct {
	key  string
	next http.RoundTripper
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.key != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.key)
	}
	return b.next.RoundTrip(r)
}
