package tests

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// faultyBundleServer is a bundle service that can go down (its listener
// closed: connection refused), come back on the same address, answer
// slowly, answer 503, or serve any bytes as the bundle.
type faultyBundleServer struct {
	t    *testing.T
	addr string

	mu   sync.Mutex
	srv  *http.Server
	mode string // ok | slow | status | raw
	body []byte // the bundle (ok) or the bytes served (raw)
	etag string
	seen []string // mode of every request answered, in order
}

func newFaultyBundleServer(t *testing.T, body []byte) *faultyBundleServer {
	t.Helper()
	b := &faultyBundleServer{t: t, addr: "127.0.0.1:0"}
	b.set("ok", body)
	b.up()
	t.Cleanup(b.down)
	return b
}

func (b *faultyBundleServer) url() string { return "http://" + b.addr + "/bundle.tar.gz" }

// up (re)starts the service on its address.
func (b *faultyBundleServer) up() {
	b.t.Helper()
	var ln net.Listener
	var err error
	// The port was ours a moment ago; retry briefly in case the kernel
	// still holds it.
	for range 50 {
		if ln, err = net.Listen("tcp", b.addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		b.t.Fatalf("bundle service: listen %s: %v", b.addr, err)
	}
	b.mu.Lock()
	b.addr = ln.Addr().String()
	b.srv = &http.Server{Handler: http.HandlerFunc(b.handle), ReadHeaderTimeout: 10 * time.Second}
	srv := b.srv
	b.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

// down closes the listener and every connection.
func (b *faultyBundleServer) down() {
	b.mu.Lock()
	srv := b.srv
	b.srv = nil
	b.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// set chooses what the service answers next.
func (b *faultyBundleServer) set(mode string, body []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mode, b.body = mode, body
	b.etag = `"` + sha256Hex(string(body)) + `"`
}

func (b *faultyBundleServer) handle(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	mode, body, etag := b.mode, b.body, b.etag
	b.seen = append(b.seen, mode)
	b.mu.Unlock()
	switch mode {
	case "slow":
		// Far longer than the gateway's fetch timeout; ends when the
		// gateway gives up and closes the connection.
		select {
		case <-r.Context().Done():
			return
		case <-time.After(30 * time.Second):
		}
	case "status":
		http.Error(w, "bundle service overloaded", http.StatusServiceUnavailable)
		return
	case "ok":
		if r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	w.Header().Set("ETag", etag)
	w.Header().Set("Content-Type", "application/gzip")
	_, _ = w.Write(body)
}

// signedRevisionBundle is revisionBundle signed with priv as key id kid.
func signedRevisionBundle(t *testing.T, d *deployment, rev, priv, kid string) []byte {
	t.Helper()
	revisionBundle(t, d, rev) // writes the sources to src-<rev>/
	archive := filepath.Join(d.dir, rev+"-signed-"+randHex(t, 3)+".tar.gz")
	gw(t, "bundle", "build", filepath.Join(d.dir, "src-"+rev), "-o", archive, "--revision", rev, "--signing-key", priv, "--key-id", kid)
	b, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// gzipped compresses b.
func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return buf.Bytes()
}

// revisionWatch records decisions made during a test: each must be an
// allow whose reason names the revision its policy_revision names.
type revisionWatch struct {
	mu       sync.Mutex
	seen     map[string]int
	problems []string
	answers  []watchAnswer
}

type watchAnswer struct {
	start, end time.Time
	revision   string
}

func (w *revisionWatch) record(start time.Time, rev string, problem string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen[rev]++
	w.answers = append(w.answers, watchAnswer{start, time.Now(), rev})
	if problem != "" {
		w.problems = append(w.problems, problem)
	}
}

// maxLatency is the longest answer that started in [from, to).
func (w *revisionWatch) maxLatency(from, to time.Time) (time.Duration, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var m time.Duration
	n := 0
	for _, a := range w.answers {
		if !a.start.Before(from) && a.start.Before(to) {
			n++
			m = max(m, a.end.Sub(a.start))
		}
	}
	return m, n
}

// TestReliabilityBundleFaults: the gateway polls a signed bundle service
// (poll_interval 1s, fetch_timeout 1s) that goes down, becomes slower than
// the fetch timeout, answers 503, and serves garbage (not gzip, gzip of
// noise, a truncated bundle, a bundle signed by another key, a tampered
// one, an unsigned one). Through all of it the last good policy keeps
// deciding with unchanged latency, /readyz stays ready, every refusal is
// counted by reason, and no decision mixes revisions; a good new revision
// then goes live.
func TestReliabilityBundleFaults(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, storeSQLite)
	priv, pub := policyKeys(t, d.dir)
	otherDir := filepath.Join(d.dir, "other-key")
	if err := os.MkdirAll(otherDir, 0o755); err != nil {
		t.Fatal(err)
	}
	otherPriv, _ := policyKeys(t, otherDir)
	revA := signedRevisionBundle(t, d, "rev-a", priv, "ops-1")
	revB := signedRevisionBundle(t, d, "rev-b", priv, "ops-1")
	forged := signedRevisionBundle(t, d, "rev-b", otherPriv, "ops-1")
	unsignedB := revisionBundle(t, d, "rev-b")
	tamperedPath := filepath.Join(d.dir, "tampered.tar.gz")
	writeFile(t, tamperedPath, revB)
	tamper(t, tamperedPath, "e2e.rego", []byte("package portcullis\n\ndecision := {\"allow\": true, \"reasons\": [\"e2e rev-b: agent-full may call Exec\"]}\n"))
	tampered, err := os.ReadFile(tamperedPath)
	if err != nil {
		t.Fatal(err)
	}
	noise := make([]byte, 64<<10)
	if _, err := rand.Read(noise); err != nil {
		t.Fatal(err)
	}

	bs := newFaultyBundleServer(t, revA)
	d.usePolicy(t, "  bundle: "+strconv.Quote(bs.url()), "  verification_key: "+strconv.Quote(pub), "  key_id: ops-1",
		"  poll_interval: 1s", "  fetch_timeout: 1s")
	g := d.start(t)
	g.execOnRevision(t, "rev-a")

	// Clients decide continuously; a few make real calls.
	w := &revisionWatch{seen: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	client := newLoadClient(16)
	const deciders, callers = 8, 2
	for i := range deciders + callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := "/v1/decisions"
			if i >= deciders {
				path = "/v1/tool-calls"
			}
			body, _ := json.Marshal(map[string]any{"tool": "Exec", "input": map[string]any{"argv": []string{"/usr/bin/true"}}})
			for ctx.Err() == nil {
				start := time.Now()
				status, rb, err := postJSON(context.Background(), client, g.baseURL+path, d.keys[agentFull], body)
				var dr struct {
					Decision struct {
						Allow          bool     `json:"allow"`
						Reasons        []string `json:"reasons"`
						PolicyRevision string   `json:"policy_revision"`
					} `json:"decision"`
				}
				problem := ""
				switch {
				case err != nil:
					problem = path + ": " + err.Error()
				case status != http.StatusOK:
					problem = fmt.Sprintf("%s: HTTP %d %.300s", path, status, rb)
				case json.Unmarshal(rb, &dr) != nil:
					problem = fmt.Sprintf("%s: undecodable %.300s", path, rb)
				case !dr.Decision.Allow:
					problem = fmt.Sprintf("%s: not allowed: %.300s", path, rb)
				case len(dr.Decision.Reasons) != 1 || dr.Decision.Reasons[0] != "e2e "+dr.Decision.PolicyRevision+": agent-full may call Exec":
					problem = fmt.Sprintf("%s: mixed revision: %.300s", path, rb)
				}
				w.record(start, dr.Decision.PolicyRevision, problem)
			}
		}()
	}

	refused := func(reason string) float64 {
		return g.metric(t, `portcullis_policy_bundle_refused_total{reason="`+reason+`"}`)
	}
	stillLive := func(phase string) {
		t.Helper()
		if r := g.do(t, http.MethodGet, "/readyz", "", nil); r.status != http.StatusOK {
			t.Errorf("%s: /readyz = %s", phase, r)
		}
		if st := g.policyStatus(t); st["revision"] != "rev-a" || st["activations"] != float64(1) {
			t.Errorf("%s: live policy = %v, want rev-a (1 activation)", phase, st)
		}
	}
	reload := func(phase, reason string) time.Duration {
		t.Helper()
		t0 := time.Now()
		r := g.do(t, http.MethodPost, "/v1/policy/reload", d.keys[admin], nil)
		took := time.Since(t0)
		if r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), `"reason":"`+reason+`"`) || !strings.Contains(string(r.body), `"revision":"rev-a"`) {
			t.Errorf("%s: reload = %s, want 422 reason %s with rev-a live", phase, r, reason)
		}
		stillLive(phase)
		return took
	}

	cycles := pick(1, 10)
	var slowest time.Duration
	tFaults := time.Now()
	for c := range cycles {
		// Down: the poller's fetches fail (connection refused).
		f0 := g.metric(t, `portcullis_policy_bundle_fetches_total{result="error"}`)
		r0 := refused("fetch")
		bs.down()
		if took, ok := pollUntil(30*time.Second, func() bool {
			return g.metric(t, `portcullis_policy_bundle_fetches_total{result="error"}`) > f0 && refused("fetch") > r0
		}); !ok {
			t.Fatalf("cycle %d: the poller counted no failed fetch within 30s of the service going down", c)
		} else if c == 0 {
			t.Logf("service down: first failed poll counted after %s", took.Round(time.Millisecond))
		}
		stillLive("service down")
		reload("service down", "fetch")

		// Slow: slower than fetch_timeout, on the poller and on reload.
		bs.set("slow", revB)
		bs.up()
		r0 = refused("fetch")
		tSlow := time.Now()
		took := reload("slow service", "fetch")
		slowest = max(slowest, took)
		if took > 15*time.Second {
			t.Errorf("reload against a slow service took %s; fetch_timeout is 1s", took)
		}
		if took < 900*time.Millisecond {
			t.Errorf("reload against a slow service failed after %s, before the 1s fetch timeout", took)
		}
		if lat, n := w.maxLatency(tSlow, time.Now()); c == 0 {
			t.Logf("slow service: reload refused after %s; %d decisions meanwhile, slowest %s", took.Round(time.Millisecond), n, lat.Round(time.Millisecond))
		}

		bs.set("status", nil)
		reload("service answering 503", "fetch")

		for _, garbage := range []struct {
			name   string
			body   []byte
			reason string
		}{
			{"not gzip", []byte("<html>502 Bad Gateway</html>"), "fetch"},
			{"gzip of noise (corrupt tar)", gzipped(noise), "fetch"},
			{"truncated bundle", revB[:len(revB)/2], "fetch"},
			{"signed by another key", forged, "signature"},
			{"tampered after signing", tampered, "signature"},
			{"unsigned", unsignedB, "signature"},
		} {
			bs.set("raw", garbage.body)
			reload(garbage.name, garbage.reason)
		}
		if refused("fetch") <= r0 {
			t.Errorf("cycle %d: refusals of the slow/garbage bundles not counted", c)
		}
		// Back to the live bundle: the poller's next fetch is a 304, which
		// resets its backoff before the next cycle.
		nm := g.metric(t, `portcullis_policy_bundle_fetches_total{result="not_modified"}`)
		bs.set("ok", revA)
		if c+1 < cycles {
			if _, ok := pollUntil(90*time.Second, func() bool {
				return g.metric(t, `portcullis_policy_bundle_fetches_total{result="not_modified"}`) > nm
			}); !ok {
				t.Fatalf("cycle %d: the poller did not come back to the live bundle (304) within 90s", c)
			}
		}
	}
	faultsTook := time.Since(tFaults)
	lat, n := w.maxLatency(tFaults, time.Now())
	t.Logf("%d fault cycles in %s: %d decisions meanwhile, slowest %s; refused fetch=%v signature=%v",
		cycles, faultsTook.Round(time.Millisecond), n, lat.Round(time.Millisecond), refused("fetch"), refused("signature"))
	if refused("signature") < float64(3*cycles) {
		t.Errorf("refused{signature} = %v, want >= %d", refused("signature"), 3*cycles)
	}

	// A good new revision goes live, and decisions move to it whole.
	bs.set("ok", revB)
	tSwitch := time.Now()
	r := g.do(t, http.MethodPost, "/v1/policy/reload", d.keys[admin], nil)
	switched := time.Now()
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"status":"activated"`) || !strings.Contains(string(r.body), `"revision":"rev-b"`) {
		t.Fatalf("reload of a good rev-b = %s", r)
	}
	if _, ok := pollUntil(10*time.Second, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.seen["rev-b"] >= 20
	}); !ok {
		t.Fatal("no decisions on rev-b 10s after it went live")
	}
	cancel()
	wg.Wait()
	g.execOnRevision(t, "rev-b")

	w.mu.Lock()
	defer w.mu.Unlock()
	p := &problems{t: t}
	for _, s := range w.problems {
		p.add("%s", s)
	}
	for _, a := range w.answers {
		switch {
		case a.revision == "rev-b" && a.end.Before(tSwitch):
			p.add("a decision on rev-b finished before rev-b was published")
		case a.revision == "rev-a" && a.start.After(switched):
			p.add("a decision started after rev-b went live was made on rev-a")
		case a.revision != "rev-a" && a.revision != "rev-b" && a.revision != "":
			p.add("decision on unknown revision %q", a.revision)
		}
	}
	p.report("bundle faults")
	t.Logf("%d decisions and calls: %v; every one allowed with its own revision's reason", len(w.answers), w.seen)
	if !strings.Contains(g.stderr.String(), "policy bundle refused; the previous policy stays live") {
		t.Error("no log line for the refused bundles")
	}
}
