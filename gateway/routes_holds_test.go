package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/evidence/sqlite"
	"github.com/portcullis/portcullis/wire"
)

const (
	holdAgentKey   = "hold-agent-key"
	holdAuditorKey = "hold-auditor-key"
	holdAdminKey   = "hold-admin-key"
)

// holdServer runs the server over a real embedded store.
func holdServer(t *testing.T) (string, *sqlite.Store) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "evidence.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	w := evidence.NewWriter(st, evidence.WriterOptions{InstanceID: "gw-holds"})
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	key := func(k, id, role string) Key {
		return Key{SHA256: sha256.Sum256([]byte(k)), Principal: wire.Principal{ID: id, Roles: []string{role}}}
	}
	ts := httptest.NewServer(New(Options{
		Keys: []Key{key(holdAgentKey, "agent-1", wire.RoleAgent), key(holdAuditorKey, "auditor-1", wire.RoleAuditor),
			key(holdAdminKey, "admin-1", wire.RoleAdmin)},
		Policy: fakePolicy{allow: true}, Evidence: w, Receipts: st, OpenAPI: OpenAPIDocument,
	}).Handler())
	t.Cleanup(ts.Close)
	return ts.URL, st
}

// send makes one request and decodes a 2xx answer into out; it returns the
// status and, otherwise, the error body.
func send(t *testing.T, method, url, key, body string, out any) (int, *wire.Error) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = bytes.NewBufferString(body)
	}
	req, _ := http.NewRequest(method, url, r)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		var eb wire.ErrorBody
		if err := json.Unmarshal(b, &eb); err != nil || eb.Error == nil {
			t.Fatalf("%s %s: %d %s is not an error body", method, url, resp.StatusCode, b)
		}
		return resp.StatusCode, eb.Error
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, url, err, b)
		}
	}
	return resp.StatusCode, nil
}

func TestHoldRoutesRoles(t *testing.T) {
	t.Parallel()
	url, _ := holdServer(t)
	const body = `{"since": "2025-01-01T00:00:00Z", "reason": "Doe v. Acme"}`
	for _, tc := range []struct {
		name, method, path, key, body string
		want                          int
	}{
		{"agent cannot place", http.MethodPost, "/v1/evidence/holds", holdAgentKey, body, http.StatusForbidden},
		{"auditor cannot place", http.MethodPost, "/v1/evidence/holds", holdAuditorKey, body, http.StatusForbidden},
		{"agent cannot list", http.MethodGet, "/v1/evidence/holds", holdAgentKey, "", http.StatusForbidden},
		{"auditor lists", http.MethodGet, "/v1/evidence/holds", holdAuditorKey, "", http.StatusOK},
		{"admin lists", http.MethodGet, "/v1/evidence/holds?active=true", holdAdminKey, "", http.StatusOK},
		{"auditor cannot release", http.MethodPost, "/v1/evidence/holds/01a2038a-e600-7925-ac5d-fa1289d56ae1/release", holdAuditorKey, `{"reason":"x"}`, http.StatusForbidden},
		{"no key", http.MethodGet, "/v1/evidence/holds", "nope", "", http.StatusUnauthorized},
		{"admin places", http.MethodPost, "/v1/evidence/holds", holdAdminKey, body, http.StatusCreated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, we := send(t, tc.method, url+tc.path, tc.key, tc.body, nil)
			if got != tc.want {
				t.Fatalf("%s %s = %d %+v; want %d", tc.method, tc.path, got, we, tc.want)
			}
			if got == http.StatusForbidden && we.Code != wire.CodeForbidden {
				t.Errorf("code = %q; want forbidden", we.Code)
			}
		})
	}
}

func TestHoldRoutesBadInput(t *testing.T) {
	t.Parallel()
	url, _ := holdServer(t)
	for _, tc := range []struct {
		name, path, body, field string
		status                  int
	}{
		{"no since", "/v1/evidence/holds", `{"reason": "x"}`, "since", 400},
		{"bad since", "/v1/evidence/holds", `{"since": "yesterday", "reason": "x"}`, "since", 400},
		{"bad until", "/v1/evidence/holds", `{"since": "2025-01-01T00:00:00Z", "until": "soon", "reason": "x"}`, "until", 400},
		{"until before since", "/v1/evidence/holds", `{"since": "2025-01-01T00:00:00Z", "until": "2024-01-01T00:00:00Z", "reason": "x"}`, "until", 400},
		{"no reason", "/v1/evidence/holds", `{"since": "2025-01-01T00:00:00Z"}`, "reason", 400},
		{"reason not a string", "/v1/evidence/holds", `{"since": "2025-01-01T00:00:00Z", "reason": 7}`, "reason", 400},
		{"placed_by from the body", "/v1/evidence/holds", `{"since": "2025-01-01T00:00:00Z", "reason": "x", "placed_by": "someone"}`, "placed_by", 400},
		{"not json", "/v1/evidence/holds", `{`, "body", 400},
		{"bad id", "/v1/evidence/holds/42/release", `{"reason": "x"}`, "id", 400},
		{"no release reason", "/v1/evidence/holds/01a2038a-e600-7925-ac5d-fa1289d56ae1/release", `{}`, "reason", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, we := send(t, http.MethodPost, url+tc.path, holdAdminKey, tc.body, nil)
			if got != tc.status || we == nil || we.Code != wire.CodeInvalidInput || we.Details["field"] != tc.field {
				t.Fatalf("POST %s %s = %d %+v; want %d invalid_input on field %q", tc.path, tc.body, got, we, tc.status, tc.field)
			}
		})
	}
	if got, we := send(t, http.MethodGet, url+"/v1/evidence/holds?active=maybe", holdAuditorKey, "", nil); got != 400 || we.Details["field"] != "active" {
		t.Errorf("?active=maybe = %d %+v; want 400 on field active", got, we)
	}
}

// TestHoldRoutesLifecycle: an admin places a hold (the placer is the
// caller's principal), auditors see it, the admin releases it with a
// reason, a second release is 412 and an unknown hold 404; ?active=true
// lists only holds still active.
func TestHoldRoutesLifecycle(t *testing.T) {
	t.Parallel()
	url, st := holdServer(t)
	var h wire.Hold
	if got, we := send(t, http.MethodPost, url+"/v1/evidence/holds", holdAdminKey,
		`{"since": "2025-01-01T00:00:00Z", "until": "2025-07-01T00:00:00Z", "reason": "Doe v. Acme 24-cv-1"}`, &h); got != http.StatusCreated {
		t.Fatalf("place = %d %+v", got, we)
	}
	if h.PlacedBy != "admin-1" || !h.Active || h.Until == nil || h.ID == "" {
		t.Fatalf("placed hold = %+v", h)
	}
	var list wire.HoldList
	if got, we := send(t, http.MethodGet, url+"/v1/evidence/holds?active=true", holdAuditorKey, "", &list); got != 200 || len(list.Holds) != 1 || list.Holds[0].ID != h.ID {
		t.Fatalf("list = %d %+v %+v", got, list, we)
	}
	var rel wire.Hold
	if got, we := send(t, http.MethodPost, url+"/v1/evidence/holds/"+h.ID+"/release", holdAdminKey, `{"reason": "settled"}`, &rel); got != 200 ||
		rel.Active || rel.ReleasedBy != "admin-1" || rel.ReleaseReason != "settled" {
		t.Fatalf("release = %d %+v %+v", got, rel, we)
	}
	if got, we := send(t, http.MethodPost, url+"/v1/evidence/holds/"+h.ID+"/release", holdAdminKey, `{"reason": "again"}`, nil); got != 412 || we.Code != wire.CodePreconditionFailed {
		t.Errorf("second release = %d %+v; want 412 precondition_failed", got, we)
	}
	if got, we := send(t, http.MethodPost, url+"/v1/evidence/holds/01a2038a-e600-7925-ac5d-fa1289d56ae1/release", holdAdminKey, `{"reason": "x"}`, nil); got != 404 || we.Code != wire.CodeNotFound {
		t.Errorf("unknown release = %d %+v; want 404 not_found", got, we)
	}
	list = wire.HoldList{}
	if got, _ := send(t, http.MethodGet, url+"/v1/evidence/holds?active=true", holdAuditorKey, "", &list); got != 200 || len(list.Holds) != 0 {
		t.Errorf("active after release = %+v", list)
	}
	if got, _ := send(t, http.MethodGet, url+"/v1/evidence/holds", holdAuditorKey, "", &list); got != 200 || len(list.Holds) != 1 || list.Holds[0].Active {
		t.Errorf("all after release = %+v", list)
	}
	// Both events are chained on the gateway's own chain.
	chain, seq, _, err := st.ChainHead(context.Background(), "gw-holds")
	if err != nil || seq != 3 {
		t.Fatalf("chain head = %s %d %v; want chain_start, legal_hold, legal_hold_release", chain, seq, err)
	}
	evs, err := st.ChainEvents(context.Background(), chain)
	if err != nil || evidence.VerifyChain(evs) != nil || evs[1].Kind != evidence.KindLegalHold || evs[2].Kind != evidence.KindLegalHoldRelease {
		t.Fatalf("chain = %+v, %v", evs, err)
	}
}

// TestHoldBodyBounded: the hold routes read their bodies through the one
// max_body_bytes bound like every other route. A chunked body (no
// Content-Length) larger than the bound is 413 too_large, not read whole
// into memory first.
func TestHoldBodyBounded(t *testing.T) {
	t.Parallel()
	url, _ := holdServer(t)
	const size = 24 << 20 // three times the default 8 MiB bound
	for _, path := range []string{"/v1/evidence/holds", "/v1/evidence/holds/0192f0a0-0000-7000-8000-000000000000/release"} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			body := io.MultiReader(bytes.NewBufferString(`{"reason":"`), io.LimitReader(neverEnding('a'), size), bytes.NewBufferString(`"}`))
			req, _ := http.NewRequest(http.MethodPost, url+path, body)
			req.ContentLength = -1
			req.Header.Set("Authorization", "Bearer "+holdAdminKey)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var eb wire.ErrorBody
			_ = json.NewDecoder(resp.Body).Decode(&eb)
			if resp.StatusCode != http.StatusRequestEntityTooLarge || eb.Error == nil || eb.Error.Code != wire.CodeTooLarge {
				t.Errorf("got %d %+v, want 413 too_large", resp.StatusCode, eb.Error)
			}
		})
	}
}

type neverEnding byte

func (b neverEnding) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(b)
	}
	return len(p), nil
}
