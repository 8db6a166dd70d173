package gateway

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/mod/sumdb/note"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/evidence/sqlite"
	"github.com/portcullis/portcullis/wire"
)

// evidenceServer runs the server over a real embedded store with a real
// checkpointer, so the proof route is tested end to end down to the
// offline verification an auditor would do.
type evidenceServer struct {
	url   string
	store *sqlite.Store
	w     *evidence.Writer
	cp    *evidence.Checkpointer
	vkey  string
}

func newEvidenceServer(t *testing.T, withAuditor bool) *evidenceServer {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "evidence.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	skey, vkey, err := note.GenerateKey(rand.Reader, "test.portcullis/gateway")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := evidence.NewCheckpointer(st, evidence.CheckpointerOptions{Signer: signer})
	if err != nil {
		t.Fatal(err)
	}
	w := evidence.NewWriter(st, evidence.WriterOptions{InstanceID: "gw-test"})
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	key := func(k, id, role string) Key {
		return Key{SHA256: sha256.Sum256([]byte(k)), Principal: wire.Principal{ID: id, Roles: []string{role}}}
	}
	opts := Options{
		Keys:   []Key{key(agentKey, "agent-1", wire.RoleAgent), key(auditorKey, "auditor-1", wire.RoleAuditor)},
		Policy: fakePolicy{allow: true}, Evidence: w, Receipts: st, OpenAPI: OpenAPIDocument,
	}
	if withAuditor {
		opts.Auditor = evidence.NewAuditor(st, vkey)
	}
	ts := httptest.NewServer(New(opts).Handler())
	t.Cleanup(ts.Close)
	return &evidenceServer{url: ts.URL, store: st, w: w, cp: cp, vkey: vkey}
}

// call records one allowed call (decision + outcome) and returns its id.
func (s *evidenceServer) call(t *testing.T, status string, code *string) uuid.UUID {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	d := evidence.Event{ID: id, Kind: evidence.KindDecision, PrincipalID: "agent-1", Tool: "Exec", Decision: wire.DecisionAllow}
	o := evidence.Event{Kind: evidence.KindOutcome, ReceiptID: id, Outcome: &wire.Outcome{Status: status, ErrorCode: code, Backend: "process", DurationMS: 5}}
	if err := s.w.Append(context.Background(), d, o); err != nil {
		t.Fatal(err)
	}
	return id
}

// getRaw returns the body of a 200 answer to GET url.
func getRaw(t *testing.T, url, key string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}

func get(t *testing.T, url, key string, out any) (int, wire.ErrorBody) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var eb wire.ErrorBody
	if resp.StatusCode != http.StatusOK {
		if err := json.Unmarshal(b, &eb); err != nil || eb.Error == nil {
			t.Fatalf("GET %s: %d %s is not an error body", url, resp.StatusCode, b)
		}
		return resp.StatusCode, eb
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("GET %s: %v: %s", url, err, b)
		}
	}
	return resp.StatusCode, eb
}

func TestReceiptProofRoute(t *testing.T) {
	t.Parallel()
	s := newEvidenceServer(t, true)
	id := s.call(t, wire.StatusSucceeded, nil)
	// No checkpoint yet: the receipt exists, the proof does not.
	if code, eb := get(t, s.url+"/v1/receipts/"+id.String()+"/proof", auditorKey, nil); code != http.StatusPreconditionFailed || eb.Error.Code != wire.CodePreconditionFailed {
		t.Fatalf("proof before checkpoint = %d %+v, want 412 precondition_failed", code, eb.Error)
	}
	if _, err := s.cp.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	var p wire.ReceiptProof
	if code, eb := get(t, s.url+"/v1/receipts/"+id.String()+"/proof", auditorKey, &p); code != http.StatusOK {
		t.Fatalf("proof = %d %+v", code, eb.Error)
	}
	if p.ReceiptID != id.String() || p.VerifierKey != s.vkey || p.Outcome == nil || p.TreeSize != 3 {
		t.Fatalf("proof = %+v", p)
	}
	// The auditor verifies offline with the key it pinned, not the served one.
	for _, ip := range []evidence.InclusionProof{p.Decision, *p.Outcome} {
		if err := evidence.VerifyInclusion(ip, s.vkey); err != nil {
			t.Errorf("VerifyInclusion(%s): %v", ip.EventID, err)
		}
	}
	var r wire.Receipt
	get(t, s.url+"/v1/receipts/"+id.String(), auditorKey, &r)
	if r.Chain == nil || r.Chain.Hash != p.Decision.EventHash || r.InstanceID != "gw-test" || r.DurationMS == nil || *r.DurationMS != 5 {
		t.Errorf("receipt chain %+v instance %q duration %v; want the proven event", r.Chain, r.InstanceID, r.DurationMS)
	}
	for _, tc := range []struct {
		path, key string
		status    int
		code      wire.Code
	}{
		{"/v1/receipts/" + uuid.NewString() + "/proof", auditorKey, 404, wire.CodeNotFound},
		{"/v1/receipts/nope/proof", auditorKey, 400, wire.CodeInvalidInput},
		{"/v1/receipts/" + id.String() + "/proof", agentKey, 403, wire.CodeForbidden},
		{"/v1/receipts/" + s.call(t, wire.StatusFailed, nil).String() + "/proof", auditorKey, 412, wire.CodePreconditionFailed},
	} {
		if code, eb := get(t, s.url+tc.path, tc.key, nil); code != tc.status || eb.Error.Code != tc.code {
			t.Errorf("GET %s = %d %+v, want %d %s", tc.path, code, eb.Error, tc.status, tc.code)
		}
	}
}

func TestEvidenceRoutesWithoutCheckpoints(t *testing.T) {
	t.Parallel()
	s := newEvidenceServer(t, false)
	id := s.call(t, wire.StatusSucceeded, nil)
	for _, path := range []string{"/v1/receipts/" + id.String() + "/proof", "/v1/evidence/stats"} {
		if code, eb := get(t, s.url+path, auditorKey, nil); code != http.StatusServiceUnavailable || eb.Error.Code != wire.CodeEvidenceUnavailable {
			t.Errorf("GET %s without checkpoints = %d %+v, want 503 evidence_unavailable", path, code, eb.Error)
		}
	}
}

func TestEvidenceStatsRoute(t *testing.T) {
	t.Parallel()
	s := newEvidenceServer(t, true)
	for range 3 {
		s.call(t, wire.StatusSucceeded, nil)
	}
	// Two denials of Read with rule ids (one id shared), one of Exec.
	for _, d := range []struct {
		tool  string
		rules []string
	}{{"Read", []string{"fs.outside_root", "fs.symlink"}}, {"Read", []string{"fs.outside_root"}}, {"Exec", []string{"exec.shape_mismatch"}}} {
		e := evidence.Event{ID: uuid.Must(uuid.NewV7()), Kind: evidence.KindDecision, PrincipalID: "agent-1", Tool: d.tool,
			Decision: wire.DecisionDeny, RuleIDs: d.rules}
		if err := s.w.Append(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.cp.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	var st wire.EvidenceStats
	if code, eb := get(t, s.url+"/v1/evidence/stats", auditorKey, &st); code != 200 {
		t.Fatalf("stats = %d %+v", code, eb.Error)
	}
	var total int64
	td := map[string]map[string]int64{}
	rules := map[string]int64{}
	for _, b := range st.Buckets {
		total += b.Total
		for tool, m := range b.ByToolDecision {
			if td[tool] == nil {
				td[tool] = map[string]int64{}
			}
			for dec, n := range m {
				td[tool][dec] += n
			}
		}
		for r, n := range b.ByRule {
			rules[r] += n
		}
	}
	if st.Interval != "hour" || st.Top != evidence.DefaultStatsTop || total != 6 || len(st.Buckets) == 0 {
		t.Errorf("stats = %+v", st)
	}
	if want := map[string]map[string]int64{"Exec": {"allow": 3, "deny": 1}, "Read": {"deny": 2}}; !reflect.DeepEqual(td, want) {
		t.Errorf("by_tool_decision = %v, want %v", td, want)
	}
	if want := map[string]int64{"fs.outside_root": 2, "fs.symlink": 1, "exec.shape_mismatch": 1}; !reflect.DeepEqual(rules, want) {
		t.Errorf("by_rule = %v, want %v", rules, want)
	}
	// The wire shape: by_tool_decision nests decisions in tools.
	body := getRaw(t, s.url+"/v1/evidence/stats?interval=day&top=1", auditorKey)
	if !strings.Contains(body, `"by_tool_decision":{`) || !strings.Contains(body, `"top":1`) ||
		!strings.Contains(body, `"by_rule":{"(other)":2,"fs.outside_root":2}`) {
		t.Errorf("stats?top=1 body = %s", body)
	}
	since := time.Now().UTC().Add(-72 * time.Hour).Format(time.RFC3339)
	if code, _ := get(t, s.url+"/v1/evidence/stats?interval=day&since="+since, auditorKey, &st); code != 200 || st.Interval != "day" || !st.Since.Equal(st.Since.Truncate(24*time.Hour)) {
		t.Errorf("day stats = %d %+v", code, st)
	}
	for _, q := range []string{"interval=week", "since=yesterday", "nope=1", "top=0", "top=1001", "top=x", "since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z",
		"interval=hour&since=2020-01-01T00:00:00Z&until=2026-01-01T00:00:00Z"} {
		if code, eb := get(t, s.url+"/v1/evidence/stats?"+q, auditorKey, nil); code != 400 || eb.Error.Code != wire.CodeInvalidInput {
			t.Errorf("stats?%s = %d %+v, want 400 invalid_input", q, code, eb.Error)
		}
	}
	if code, _ := get(t, s.url+"/v1/evidence/stats", agentKey, nil); code != 403 {
		t.Errorf("stats as agent = %d, want 403", code)
	}
}

func TestReceiptOutcomeFilters(t *testing.T) {
	t.Parallel()
	s := newEvidenceServer(t, true)
	code := "timeout"
	ok, timedOut := s.call(t, wire.StatusSucceeded, nil), s.call(t, wire.StatusTimedOut, &code)
	for _, tc := range []struct {
		q    string
		want []uuid.UUID
	}{
		{"outcome=succeeded", []uuid.UUID{ok}},
		{"outcome=timed_out", []uuid.UUID{timedOut}},
		{"error_code=timeout", []uuid.UUID{timedOut}},
		{"outcome=pending", nil},
	} {
		var list wire.ReceiptList
		if st, eb := get(t, s.url+"/v1/receipts?"+tc.q, auditorKey, &list); st != 200 {
			t.Fatalf("receipts?%s = %d %+v", tc.q, st, eb.Error)
		}
		if len(list.Receipts) != len(tc.want) || (len(tc.want) == 1 && list.Receipts[0].ID != tc.want[0].String()) {
			t.Errorf("receipts?%s = %+v, want %v", tc.q, list.Receipts, tc.want)
		}
	}
	if st, eb := get(t, s.url+"/v1/receipts?outcome=done", auditorKey, nil); st != 400 || eb.Error.Details["field"] != "outcome" {
		t.Errorf("receipts?outcome=done = %d %+v, want 400 on field outcome", st, eb.Error)
	}
	req, _ := http.NewRequest(http.MethodGet, s.url+"/v1/receipts/export?format=csv&error_code=timeout", nil)
	req.Header.Set("Authorization", "Bearer "+auditorKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if lines := strings.Count(string(b), "\n"); resp.StatusCode != 200 || lines != 2 {
		t.Errorf("export csv error_code=timeout = %d, %d lines:\n%s", resp.StatusCode, lines, b)
	}
}

// TestReceiptTextSearch: q searches the recorded arguments and reasons,
// in the list and the export alike, and is bounded.
func TestReceiptTextSearch(t *testing.T) {
	t.Parallel()
	s := newEvidenceServer(t, true)
	add := func(args string, reasons ...string) uuid.UUID {
		id := uuid.Must(uuid.NewV7())
		d := evidence.Event{ID: id, Kind: evidence.KindDecision, PrincipalID: "agent-1", Tool: "Exec",
			Decision: wire.DecisionDeny, Reasons: reasons, Args: json.RawMessage(args)}
		if err := s.w.Append(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		return id
	}
	git := add(`{"argv":["/usr/bin/git","push"]}`, "git push needs approval")
	rm := add(`{"argv":["/bin/rm","-rf","/srv/Work"]}`, "rm is not granted")
	for _, tc := range []struct {
		q    string
		want []uuid.UUID
	}{
		{"git", []uuid.UUID{git}},
		{"SRV/work", []uuid.UUID{rm}},
		{"not granted", []uuid.UUID{rm}},
		{"%", nil},
	} {
		var list wire.ReceiptList
		if st, eb := get(t, s.url+"/v1/receipts?q="+url.QueryEscape(tc.q), auditorKey, &list); st != 200 {
			t.Fatalf("receipts?q=%s = %d %+v", tc.q, st, eb.Error)
		}
		if got := ids(list.Receipts); !slices.Equal(got, uuidStrings(tc.want)) {
			t.Errorf("receipts?q=%s = %v, want %v", tc.q, got, tc.want)
		}
	}
	body := getRaw(t, s.url+"/v1/receipts/export?format=csv&q=approval", auditorKey)
	if lines := strings.Split(strings.TrimSpace(body), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[1], git.String()+",") {
		t.Errorf("export csv q=approval:\n%s", body)
	}
	for _, q := range []string{strings.Repeat("a", evidence.MaxTextLen+1), "a\x00b", "a\nb"} {
		if st, eb := get(t, s.url+"/v1/receipts/export?q="+url.QueryEscape(q), auditorKey, nil); st != 400 || eb.Error.Details["field"] != "q" {
			t.Errorf("export?q=%q = %d %+v, want 400 on field q", q, st, eb.Error)
		}
	}
	if st, _ := get(t, s.url+"/v1/receipts/export?q=git", agentKey, nil); st != 403 {
		t.Errorf("export as agent = %d, want 403", st)
	}
}

func ids(rs []wire.Receipt) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}

func uuidStrings(us []uuid.UUID) []string {
	out := []string{}
	for _, u := range us {
		out = append(out, u.String())
	}
	return out
}
