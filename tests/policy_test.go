package tests

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/evidence/sqlite"
)

// policyKeys writes an RSA key pair for bundle signing and returns the
// private and public PEM paths.
func policyKeys(t *testing.T, dir string) (string, string) {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(k)
	pub, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
	priv, pubPath := filepath.Join(dir, "signing.pem"), filepath.Join(dir, "verify.pem")
	writeFile(t, priv, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	writeFile(t, pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))
	return priv, pubPath
}

// gw runs the gateway CLI and fails the test on error.
func gw(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(gatewayBin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("gateway %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// tamper rewrites one file of a .tar.gz bundle in place, keeping its
// signature: what an attacker with write access to the bundle store does.
func tamper(t *testing.T, archive, file string, data []byte) {
	t.Helper()
	raw, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	tr := tar.NewReader(zr)
	found := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		if strings.TrimPrefix(h.Name, "/") == file {
			b, found = data, true
		}
		h.Size = int64(len(b))
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write(b)
	}
	if !found {
		t.Fatalf("%s not in %s", file, archive)
	}
	tw.Close()
	zw.Close()
	writeFile(t, archive, buf.Bytes())
}

// useSignedBundle points the deployment at archive with verification on.
func (d *deployment) useSignedBundle(t *testing.T, archive, pub, kid string) {
	t.Helper()
	cfg, err := os.ReadFile(d.configPath)
	if err != nil {
		t.Fatal(err)
	}
	old := "policy:\n  bundle: " + strconv.Quote(d.bundleDir) + "\n"
	if !bytes.Contains(cfg, []byte(old)) {
		t.Fatalf("config has no %q", old)
	}
	repl := "policy:\n  bundle: " + strconv.Quote(archive) + "\n  verification_key: " + strconv.Quote(pub) + "\n  key_id: " + kid + "\n"
	writeFile(t, d.configPath, bytes.Replace(cfg, []byte(old), []byte(repl), 1))
}

// TestPolicySignedLifecycle: a signed .tar.gz goes live with its signer
// shown; a tampered bundle is refused on reload (422, metric, old policy
// stays); a newly signed revision activates; roles guard the routes.
func TestPolicySignedLifecycle(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, storeSQLite)
	priv, pub := policyKeys(t, d.dir)
	archive := filepath.Join(d.dir, "policy.tar.gz")
	gw(t, "bundle", "build", d.bundleDir, "-o", archive, "--signing-key", priv, "--key-id", "ops-1", "--revision", "v1")
	insp := gw(t, "bundle", "inspect", archive, "--verification-key", pub, "--key-id", "ops-1")
	if !strings.Contains(insp, "key id ops-1, algorithm RS256, VERIFIED") || !strings.Contains(insp, "revision:  v1") {
		t.Fatalf("inspect:\n%s", insp)
	}
	d.useSignedBundle(t, archive, pub, "ops-1")
	g := d.start(t)

	status := func() map[string]any {
		t.Helper()
		r := g.do(t, http.MethodGet, "/v1/policy", d.keys[auditor], nil)
		if r.status != http.StatusOK {
			t.Fatalf("GET /v1/policy = %d %s", r.status, r.body)
		}
		var m map[string]any
		if err := json.Unmarshal(r.body, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	st := status()
	if st["revision"] != "v1" || st["verified"] != true || st["key_id"] != "ops-1" || st["algorithm"] != "RS256" || st["activations"] != float64(1) {
		t.Fatalf("live policy = %v", st)
	}
	if r := g.do(t, http.MethodGet, "/v1/policy", d.keys[agentFull], nil); r.status != http.StatusForbidden {
		t.Errorf("agent GET /v1/policy = %d, want 403", r.status)
	}
	if r := g.do(t, http.MethodPost, "/v1/policy/reload", d.keys[auditor], nil); r.status != http.StatusForbidden {
		t.Errorf("auditor reload = %d, want 403", r.status)
	}

	// Tampered: everyone may now Exec. Refused; v1 stays live.
	tamper(t, archive, "e2e.rego", []byte("package portcullis\n\ndecision := {\"allow\": true}\n"))
	r := g.do(t, http.MethodPost, "/v1/policy/reload", d.keys[admin], nil)
	if r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), `"reason":"signature"`) || !strings.Contains(string(r.body), "digest mismatch") {
		t.Fatalf("reload of a tampered bundle = %d %s", r.status, r.body)
	}
	if st := status(); st["revision"] != "v1" || st["activations"] != float64(1) {
		t.Fatalf("after a refused reload the live policy is %v", st)
	}
	if dr := g.do(t, http.MethodPost, "/v1/decisions", d.keys[agentNoExec], map[string]any{"tool": "Exec", "input": map[string]any{"argv": []string{"/usr/bin/true"}}}); !strings.Contains(string(dr.body), `"allow":false`) {
		t.Fatalf("tampered policy took effect: %s", dr.body)
	}
	m := g.do(t, http.MethodGet, "/metrics", "", nil)
	if !strings.Contains(string(m.body), `portcullis_policy_bundle_refused_total{reason="signature"} 1`) {
		t.Errorf("refusal metric missing:\n%s", grepLines(string(m.body), "portcullis_policy"))
	}
	if !strings.Contains(g.stderr.String(), "policy bundle refused") {
		t.Error("no log line for the refused bundle")
	}

	// A new signed revision activates through the API.
	gw(t, "bundle", "build", d.bundleDir, "-o", archive, "--signing-key", priv, "--key-id", "ops-1", "--revision", "v2")
	r = g.do(t, http.MethodPost, "/v1/policy/reload", d.keys[admin], nil)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"status":"activated"`) || !strings.Contains(string(r.body), `"revision":"v2"`) {
		t.Fatalf("reload of v2 = %d %s", r.status, r.body)
	}
	if st := status(); st["revision"] != "v2" || st["activations"] != float64(2) {
		t.Fatalf("after v2: %v", st)
	}
	// Reloading the same bundle changes nothing.
	r = g.do(t, http.MethodPost, "/v1/policy/reload", d.keys[admin], nil)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"status":"unchanged"`) {
		t.Fatalf("second reload = %d %s", r.status, r.body)
	}
}

// TestPolicyUnsignedRefusedAtStart: with a verification key configured an
// unsigned bundle never activates, so the gateway does not start.
func TestPolicyUnsignedRefusedAtStart(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, storeSQLite)
	_, pub := policyKeys(t, d.dir)
	archive := filepath.Join(d.dir, "policy.tar.gz")
	gw(t, "bundle", "build", d.bundleDir, "-o", archive, "--revision", "v1")
	d.useSignedBundle(t, archive, pub, "ops-1")
	g, err := tryStartProcess(t, d, startOptions{})
	if err == nil {
		g.stop(5e9)
		t.Fatal("the gateway started with an unsigned bundle and a verification key")
	}
	if !strings.Contains(err.Error(), "missing .signatures.json") {
		t.Errorf("start error does not say why: %v", err)
	}
}

// TestPolicyDryRunExplains: a dry-run denial names the rule that produced
// the reason.
func TestPolicyDryRunExplains(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, storeSQLite)
	g := d.start(t)
	r := g.do(t, http.MethodPost, "/v1/decisions", d.keys[agentNoExec], map[string]any{"tool": "Exec", "input": map[string]any{"argv": []string{"/usr/bin/true"}}})
	var resp struct {
		Explanation []struct {
			Reason string   `json:"reason"`
			Rules  []string `json:"rules"`
		} `json:"explanation"`
	}
	if err := json.Unmarshal(r.body, &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.Explanation) != 1 || len(resp.Explanation[0].Rules) == 0 || !strings.Contains(resp.Explanation[0].Rules[0], "data.portcullis.decision") {
		t.Fatalf("explanation = %s", r.body)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// bundleServer is a bundle service on loopback: one .tar.gz at
// /bundle.tar.gz with a strong ETag (its SHA-256), answering a matching
// If-None-Match with 304 as an OPA bundle server or S3 does.
type bundleServer struct {
	srv  *httptest.Server
	mu   sync.Mutex
	body []byte
	etag string
	log  []int // status of every answer, in order
}

func newBundleServer(t *testing.T, body []byte) *bundleServer {
	t.Helper()
	b := &bundleServer{}
	b.set(body)
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		defer b.mu.Unlock()
		if r.URL.Path != "/bundle.tar.gz" {
			b.log = append(b.log, http.StatusNotFound)
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("If-None-Match") == b.etag {
			b.log = append(b.log, http.StatusNotModified)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		b.log = append(b.log, http.StatusOK)
		w.Header().Set("ETag", b.etag)
		w.Header().Set("Content-Type", "application/gzip")
		w.Write(b.body)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *bundleServer) url() string { return b.srv.URL + "/bundle.tar.gz" }

// set replaces the bundle served; it returns how many requests were
// answered before, so callers can look at what came after.
func (b *bundleServer) set(body []byte) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.body = body
	b.etag = `"` + sha256Hex(string(body)) + `"`
	return len(b.log)
}

// answers returns the statuses answered from index from on.
func (b *bundleServer) answers(from int) []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.log[min(from, len(b.log)):]...)
}

// revisionBundle builds the e2e policy as revision rev, with every reason
// naming rev ("e2e <rev>: agent-full may call Exec"), so a decision shows
// which bundle produced it independently of its policy_revision field.
func revisionBundle(t *testing.T, d *deployment, rev string) []byte {
	t.Helper()
	dir := filepath.Join(d.dir, "src-"+rev)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rego, err := os.ReadFile(filepath.Join(d.bundleDir, "e2e.rego"))
	if err != nil {
		t.Fatal(err)
	}
	out := strings.ReplaceAll(string(rego), `"e2e: `, `"e2e `+rev+`: `)
	if out == string(rego) {
		t.Fatal("e2e.rego has no \"e2e: \" reason to rewrite")
	}
	writeFile(t, filepath.Join(dir, "e2e.rego"), []byte(out))
	data, err := os.ReadFile(filepath.Join(d.bundleDir, "data.json"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "data.json"), data)
	archive := filepath.Join(d.dir, rev+".tar.gz")
	gw(t, "bundle", "build", dir, "-o", archive, "--revision", rev)
	b, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// usePolicy replaces the deployment's policy section (bundle directory)
// with lines (each "  key: value").
func (d *deployment) usePolicy(t *testing.T, lines ...string) {
	t.Helper()
	cfg, err := os.ReadFile(d.configPath)
	if err != nil {
		t.Fatal(err)
	}
	old := "policy:\n  bundle: " + strconv.Quote(d.bundleDir) + "\n"
	if !bytes.Contains(cfg, []byte(old)) {
		t.Fatalf("config has no %q", old)
	}
	repl := "policy:\n" + strings.Join(lines, "\n") + "\n"
	writeFile(t, d.configPath, bytes.Replace(cfg, []byte(old), []byte(repl), 1))
}

// metric reads one series (name with its labels, as exposed) from
// /metrics; 0 when absent.
func (g *gateway) metric(t *testing.T, series string) float64 {
	t.Helper()
	r := g.do(t, http.MethodGet, "/metrics", "", nil)
	for _, l := range strings.Split(string(r.body), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metric %s: %v", l, err)
			}
			return f
		}
	}
	return 0
}

// policyStatus is GET /v1/policy as the auditor.
func (g *gateway) policyStatus(t *testing.T) map[string]any {
	t.Helper()
	r := g.do(t, http.MethodGet, "/v1/policy", g.dep.keys[auditor], nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET /v1/policy = %s", r)
	}
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// execOnRevision makes a real Exec call as agent-full and checks that the
// answer and the receipt both carry revision rev, with rev's reason.
func (g *gateway) execOnRevision(t *testing.T, rev string) {
	t.Helper()
	res := g.call(t, g.dep.keys[agentFull], map[string]any{"tool": "Exec", "input": map[string]any{"argv": []string{"/usr/bin/true"}}})
	if res.Decision == nil || !res.Decision.Allow || res.Decision.PolicyRevision != rev {
		t.Fatalf("call decided on %+v, want allow on %s\n%s", res.Decision, rev, res.response)
	}
	want := "e2e " + rev + ": agent-full may call Exec"
	if len(res.Decision.Reasons) != 1 || res.Decision.Reasons[0] != want {
		t.Fatalf("reasons %q, want [%q]", res.Decision.Reasons, want)
	}
	rc := g.checkReceipt(t, res, expectReceipt{principal: agentFull, decision: "allow", statuses: []string{"succeeded"}}, "", "")
	if rc.PolicyRevision != rev {
		t.Fatalf("receipt policy_revision = %q, want %q", rc.PolicyRevision, rev)
	}
}

// TestPolicyBundleServicePolling runs the gateway against a bundle service
// on loopback polled every second: 304s compile nothing, a new revision is
// live after one poll and in the receipts, and with the service down the
// last good bundle keeps deciding while readiness holds and the failures
// show in the metrics and the log.
func TestPolicyBundleServicePolling(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, storeSQLite)
	revA, revB := revisionBundle(t, d, "rev-a"), revisionBundle(t, d, "rev-b")
	bs := newBundleServer(t, revA)
	d.usePolicy(t, "  bundle: "+strconv.Quote(bs.url()), "  poll_interval: 1s")
	g := d.start(t)
	g.execOnRevision(t, "rev-a")
	const (
		compiles    = "portcullis_policy_bundle_compiles_total"
		notModified = `portcullis_policy_bundle_fetches_total{result="not_modified"}`
		fetchErrors = `portcullis_policy_bundle_fetches_total{result="error"}`
	)

	// 304s: several polls, nothing compiled, nothing activated.
	st0 := g.policyStatus(t)
	c0 := g.metric(t, compiles)
	if c0 != 1 {
		t.Fatalf("%s = %v after start, want 1", compiles, c0)
	}
	time.Sleep(3500 * time.Millisecond)
	// The service logs a 304 before the gateway counts it, so a poll in
	// flight can put the two one apart for a moment: read both until they
	// agree (polls are a second apart, so they do within milliseconds).
	var n304, nm int
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		n304 = 0
		for _, s := range bs.answers(1) {
			if s == http.StatusNotModified {
				n304++
			} else {
				t.Fatalf("bundle service answered %d to a poll of an unchanged bundle", s)
			}
		}
		nm = int(g.metric(t, notModified))
		if nm == n304 || time.Now().After(deadline) {
			break
		}
	}
	if n304 < 2 {
		t.Fatalf("only %d conditional polls in 3.5s at poll_interval 1s", n304)
	}
	if c := g.metric(t, compiles); c != c0 {
		t.Errorf("%d 304s compiled %v bundles", n304, c-c0)
	}
	if nm != n304 {
		t.Errorf("%s = %v, the service answered %d 304s", notModified, nm, n304)
	}
	if st := g.policyStatus(t); st["loaded_at"] != st0["loaded_at"] || st["activations"] != float64(1) || st["revision"] != "rev-a" {
		t.Errorf("after 304s the live policy changed: %v -> %v", st0, st)
	}

	// A new revision: the next poll fetches it (200) and activates it.
	from := bs.set(revB)
	t0 := time.Now()
	for g.policyStatus(t)["revision"] != "rev-b" {
		// One poll interval plus fetch and compile; the slack is for a
		// loaded CI box (the one-poll claim is checked on the answers below).
		if time.Since(t0) > 5*time.Second {
			t.Fatalf("rev-b not live %s after publishing it (poll_interval 1s); service answers since: %v", time.Since(t0), bs.answers(from))
		}
		time.Sleep(25 * time.Millisecond)
	}
	took := time.Since(t0)
	if a := bs.answers(from); len(a) == 0 || a[0] != http.StatusOK {
		t.Fatalf("the first poll after publishing got %v, want 200", a)
	}
	t.Logf("rev-b live %s after publishing", took.Round(time.Millisecond))
	if c := g.metric(t, compiles); c != c0+1 {
		t.Errorf("%s = %v after one new revision, want %v", compiles, c, c0+1)
	}
	g.execOnRevision(t, "rev-b")

	// Service down: fetches fail, rev-b keeps deciding, still ready.
	bs.srv.Close()
	t1 := time.Now()
	for g.metric(t, fetchErrors) < 1 {
		if time.Since(t1) > 5*time.Second {
			t.Fatal("no failed fetch counted 5s after the bundle service went down")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r := g.do(t, http.MethodGet, "/readyz", "", nil); r.status != http.StatusOK {
		t.Errorf("/readyz with the bundle service down = %s", r)
	}
	if v := g.metric(t, `portcullis_policy_bundle_refused_total{reason="fetch"}`); v < 1 {
		t.Errorf("refused{reason=fetch} = %v", v)
	}
	g.execOnRevision(t, "rev-b")
	r := g.do(t, http.MethodPost, "/v1/policy/reload", d.keys[admin], nil)
	if r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), `"reason":"fetch"`) || !strings.Contains(string(r.body), `"revision":"rev-b"`) {
		t.Errorf("reload with the service down = %s", r)
	}
	if st := g.policyStatus(t); st["revision"] != "rev-b" || st["activations"] != float64(2) {
		t.Errorf("with the service down the live policy is %v", st)
	}
	if !strings.Contains(g.stderr.String(), `"msg":"policy bundle refused; the previous policy stays live","reason":"fetch"`) {
		t.Errorf("no log line for the failed fetch:\n%s", grepLines(g.stderr.String(), "refused"))
	}
}

// TestPolicyReloadUnderLoad: 16 clients decide continuously while the
// bundle service alternates two revisions and 50 reloads go through the
// API. Every answer is 200 and its reasons name the revision its
// policy_revision names: no failed and no mixed-revision decision.
func TestPolicyReloadUnderLoad(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, storeSQLite)
	bodies := map[string][]byte{"rev-a": revisionBundle(t, d, "rev-a"), "rev-b": revisionBundle(t, d, "rev-b")}
	bs := newBundleServer(t, bodies["rev-a"])
	d.usePolicy(t, "  bundle: "+strconv.Quote(bs.url()), "  poll_interval: 1h")
	g := d.start(t)

	const clients, reloads = 16, 50
	var (
		mu       sync.Mutex
		total    int
		seen     = map[string]int{}
		problems []string
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	body := map[string]any{"tool": "Exec", "input": map[string]any{"argv": []string{"/usr/bin/true"}}}
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := g.tryDo(context.Background(), http.MethodPost, "/v1/decisions", "Bearer "+d.keys[agentFull], body)
				var dr struct {
					Decision struct {
						Allow          bool     `json:"allow"`
						Reasons        []string `json:"reasons"`
						PolicyRevision string   `json:"policy_revision"`
					} `json:"decision"`
					Error json.RawMessage `json:"error"`
				}
				problem := ""
				switch {
				case err != nil:
					problem = err.Error()
				case r.status != http.StatusOK:
					problem = r.String()
				case json.Unmarshal(r.body, &dr) != nil:
					problem = "undecodable: " + r.String()
				case !dr.Decision.Allow || dr.Error != nil:
					problem = "not allowed: " + r.String()
				case len(dr.Decision.Reasons) != 1 || dr.Decision.Reasons[0] != "e2e "+dr.Decision.PolicyRevision+": agent-full may call Exec":
					problem = "mixed revision: " + r.String()
				}
				mu.Lock()
				total++
				seen[dr.Decision.PolicyRevision]++
				if problem != "" {
					problems = append(problems, problem)
				}
				mu.Unlock()
			}
		}()
	}
	t0 := time.Now()
	for i := range reloads {
		rev := "rev-b"
		if i%2 == 1 {
			rev = "rev-a"
		}
		bs.set(bodies[rev])
		r := g.do(t, http.MethodPost, "/v1/policy/reload", d.keys[admin], nil)
		if r.status != http.StatusOK || !strings.Contains(string(r.body), `"status":"activated"`) || !strings.Contains(string(r.body), `"revision":"`+rev+`"`) {
			t.Errorf("reload %d to %s = %s", i+1, rev, r)
		}
		time.Sleep(20 * time.Millisecond) // let some decisions land on each revision
	}
	close(stop)
	wg.Wait()
	elapsed := time.Since(t0)
	t.Logf("%d decisions by %d clients during %d reloads in %s: %v", total, clients, reloads, elapsed.Round(time.Millisecond), seen)
	for i, p := range problems {
		if i == 10 {
			t.Errorf("... and %d more", len(problems)-10)
			break
		}
		t.Error(p)
	}
	if len(problems) > 0 {
		t.Fatalf("%d of %d decisions failed or mixed revisions", len(problems), total)
	}
	if total < 10*reloads || seen["rev-a"] == 0 || seen["rev-b"] == 0 {
		t.Fatalf("load too thin to mean anything: %d decisions, %v", total, seen)
	}
	if st := g.policyStatus(t); st["activations"] != float64(reloads+1) || st["revision"] != "rev-a" {
		t.Errorf("after %d reloads: %v", reloads, st)
	}
}

// TestPolicyShadowDiff: a shadow bundle that denies what the live one
// allows leaves the live decision alone and records each difference, as a
// metric and as shadow_diff evidence in the hash-chained log.
func TestPolicyShadowDiff(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, storeSQLite)
	shadowDir := filepath.Join(d.dir, "shadow")
	if err := os.MkdirAll(shadowDir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(shadowDir, "shadow.rego"), []byte("package portcullis\n\ndecision := {\"allow\": false, \"reasons\": [\"shadow: Exec is retired\"]}\n"))
	writeFile(t, filepath.Join(shadowDir, ".manifest"), []byte(`{"revision":"candidate-1"}`))
	d.usePolicy(t, "  bundle: "+strconv.Quote(d.bundleDir), "  shadow_bundle: "+strconv.Quote(shadowDir))
	g := d.start(t)
	live := g.policyStatus(t)["revision"].(string)

	const calls = 5
	callIDs := map[string]bool{}
	for i := range calls {
		id := fmt.Sprintf("shadow-call-%d", i)
		callIDs[id] = true
		res := g.call(t, d.keys[agentFull], map[string]any{"tool": "Exec", "call_id": id, "input": map[string]any{"argv": []string{"/usr/bin/true"}}})
		if res.Decision == nil || !res.Decision.Allow || res.Decision.PolicyRevision != live || !res.Output.Success {
			t.Fatalf("the shadow changed the live decision: %s", res.response)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for g.metric(t, `portcullis_policy_shadow_diffs_total{field="allow"}`) < calls {
		if time.Now().After(deadline) {
			t.Fatalf("shadow diffs counted: %v, want %d", g.metric(t, `portcullis_policy_shadow_diffs_total{field="allow"}`), calls)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := g.stop(10 * time.Second); err != nil {
		t.Fatalf("gateway stop: %v", err)
	}

	// The evidence, read from the store the gateway wrote.
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(d.dataDir, "evidence.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	chains, err := st.Chains(ctx)
	if err != nil {
		t.Fatal(err)
	}
	diffs := 0
	for _, c := range chains {
		evs, err := st.ChainEventsFrom(ctx, c.ChainID, 0, 100000)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Kind != evidence.KindShadowDiff {
				continue
			}
			var sd struct {
				LiveRevision   string   `json:"live_revision"`
				ShadowRevision string   `json:"shadow_revision"`
				Fields         []string `json:"fields"`
				Live           struct{ Allow bool }
				Shadow         struct {
					Allow   bool
					Reasons []string
				}
			}
			if err := json.Unmarshal(e.Body, &sd); err != nil {
				t.Fatalf("shadow_diff body: %v\n%s", err, e.Body)
			}
			if !callIDs[e.CallID] || e.PrincipalID != agentFull || e.Tool != "Exec" || e.PolicyRevision != live ||
				sd.LiveRevision != live || sd.ShadowRevision != "candidate-1" || !sd.Live.Allow || sd.Shadow.Allow ||
				len(sd.Shadow.Reasons) != 1 || sd.Shadow.Reasons[0] != "shadow: Exec is retired" || !slices.Contains(sd.Fields, "allow") {
				t.Errorf("shadow_diff event: call %q principal %q tool %q revision %q body %s", e.CallID, e.PrincipalID, e.Tool, e.PolicyRevision, e.Body)
			}
			diffs++
		}
	}
	if diffs != calls {
		t.Errorf("%d shadow_diff events, want %d (one per call)", diffs, calls)
	}
}

// TestPolicyReplay: a receipt re-decided against the archived bundle of its
// revision matches; against a bundle that decides otherwise it does not
// (exit 1), and the report names the limits of the rebuilt input.
func TestPolicyReplay(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, storeSQLite)
	g := d.start(t)
	rev := g.policyStatus(t)["revision"].(string)
	allowed := g.call(t, d.keys[agentFull], map[string]any{"tool": "Exec", "input": map[string]any{"argv": []string{"/usr/bin/true"}}})
	denied := g.call(t, d.keys[agentNoExec], map[string]any{"tool": "Exec", "input": map[string]any{"argv": []string{"/usr/bin/true"}}})
	g.checkReceipt(t, allowed, expectReceipt{principal: agentFull, decision: "allow", statuses: []string{"succeeded"}}, "", "")
	if err := g.stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	type report struct {
		Bundle   string `json:"bundle"`
		Revision string `json:"revision"`
		Recorded struct {
			Decision string `json:"decision"`
		} `json:"recorded"`
		Replayed struct {
			Decision string   `json:"decision"`
			Reasons  []string `json:"reasons"`
		} `json:"replayed"`
		Match  bool     `json:"match"`
		Limits []string `json:"limits"`
	}
	replay := func(id string, extra ...string) (report, error) {
		t.Helper()
		cmd := exec.Command(gatewayBin, append([]string{"policy", "replay", "--config", d.configPath, id}, extra...)...)
		cmd.Dir = d.dir
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		var r report
		if jerr := json.Unmarshal(out, &r); jerr != nil {
			t.Fatalf("replay %s: %v %v\n%s\n%s", id, err, jerr, out, stderr.String())
		}
		return r, err
	}
	for _, c := range []struct {
		id, want string
	}{{allowed.ReceiptID, "allow"}, {denied.ReceiptID, "deny"}} {
		r, err := replay(c.id)
		if err != nil || !r.Match || r.Recorded.Decision != c.want || r.Replayed.Decision != c.want || r.Revision != rev ||
			!strings.HasPrefix(r.Bundle, filepath.Join(d.dataDir, "bundles")+"/") || len(r.Limits) == 0 {
			t.Errorf("replay of the %s receipt: err %v, %+v", c.want, err, r)
		}
	}
	// A candidate that takes Exec away from agent-full: the replay differs.
	cand := filepath.Join(d.dir, "candidate")
	if err := os.MkdirAll(cand, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(cand, "p.rego"), []byte("package portcullis\n\ndecision := {\"allow\": false, \"reasons\": [\"candidate: no Exec\"]}\n"))
	r, err := replay(allowed.ReceiptID, "--bundle", cand)
	if err == nil || r.Match || r.Replayed.Decision != "deny" || len(r.Replayed.Reasons) != 1 || r.Replayed.Reasons[0] != "candidate: no Exec" {
		t.Errorf("replay against a denying candidate: err %v, %+v", err, r)
	}
}
