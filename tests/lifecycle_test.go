package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCrashRecovery kills the gateway with SIGKILL in the middle of a call and
// restarts it on the same data: the call's receipt, left pending, must become
// "interrupted", the running child must not outlive the gateway, and finished
// receipts must keep their outcome.
func TestCrashRecovery(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, d *deployment) {
		g := d.start(t)
		key := d.keys[agentFull]

		done := g.call(t, key, execCall(map[string]any{"argv": []string{"/bin/echo", "before"}}, "", ""))
		wantStatus(t, done, http.StatusOK, "")
		g.waitReceipt(t, done.ReceiptID, 5*time.Second, func(rc receipt) bool { return rc.status() == "succeeded" })

		marker := sleepMarker(t, 30)
		session := "crash-" + randHex(t, 6)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			// The answer never comes: the gateway is killed under it.
			_, _ = g.tryDo(ctx, http.MethodPost, "/v1/tool-calls", "Bearer "+key,
				execCall(map[string]any{"argv": []string{"/bin/sleep", marker}, "timeout_s": 60}, "call_crash", session))
		}()

		var pending receipt
		deadline := time.Now().Add(20 * time.Second)
		for {
			rs := g.listReceipts(t, url.Values{"session_id": {session}})
			if len(rs) == 1 && rs[0].status() == "pending" && len(procsWithMarker(marker)) > 0 {
				pending = rs[0]
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no pending receipt with a running child within 20s (receipts %+v, child pids %v)", rs, procsWithMarker(marker))
			}
			time.Sleep(100 * time.Millisecond)
		}
		if pending.Decision != "allow" {
			t.Errorf("pending receipt decision = %q, want allow", pending.Decision)
		}

		g.kill()
		if left := waitNoProcs(marker, 3*time.Second); len(left) > 0 {
			t.Errorf("the call's child (pids %v) survived the gateway's SIGKILL", left)
		}

		g2 := d.start(t)
		rc := g2.waitReceipt(t, pending.ID, 20*time.Second, func(rc receipt) bool { return rc.status() == "interrupted" })
		if rc.Decision != "allow" || rc.CallID != "call_crash" || rc.SessionID != session || !hex64.MatchString(rc.ArgsSHA256) {
			t.Errorf("interrupted receipt lost its decision part: %s", rc.raw)
		}
		if before, ok := g2.getReceipt(t, done.ReceiptID); !ok || before.status() != "succeeded" {
			t.Errorf("a finished receipt changed across the restart: %s", before.raw)
		}

		after := g2.call(t, key, execCall(map[string]any{"argv": []string{"/bin/echo", "after"}}, "", ""))
		wantStatus(t, after, http.StatusOK, "")
		g2.checkReceipt(t, after, expectReceipt{
			principal: agentFull, decision: "allow", statuses: []string{"succeeded"}, secrets: []string{d.secret},
		}, "", "")
	})
}

// TestGracefulShutdown sends SIGTERM while a call is in flight: the call
// finishes and is answered, its receipt is complete, and the gateway exits 0.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, storeSQLite)
	g := d.start(t)
	key := d.keys[agentFull]
	marker := sleepMarker(t, 1)

	type answer struct {
		r   response
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		r, err := g.tryDo(context.Background(), http.MethodPost, "/v1/tool-calls", "Bearer "+key,
			execCall(map[string]any{"argv": []string{"/bin/sleep", marker}, "timeout_s": 30}, "", ""))
		ch <- answer{r, err}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(procsWithMarker(marker)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the call's child never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t0 := time.Now()
	exitErr := g.stop(20 * time.Second)
	if exitErr != nil {
		t.Errorf("gateway exit after SIGTERM: %v, want exit 0", exitErr)
	}
	if el := time.Since(t0); el > 15*time.Second {
		t.Errorf("graceful shutdown took %s", el)
	}
	a := <-ch
	if a.err != nil {
		t.Fatalf("in-flight call was cut off by the graceful shutdown: %v", a.err)
	}
	res := decodeToolCall(t, a.r)
	wantStatus(t, res, http.StatusOK, "")
	if x := res.exec(t); x.ExitCode == nil || *x.ExitCode != 0 || x.TimedOut {
		t.Errorf("in-flight call did not finish normally: %s", a.r)
	}

	// The receipt was completed before exit: check it after a restart.
	g2 := d.start(t)
	g2.checkReceipt(t, res, expectReceipt{
		principal: agentFull, decision: "allow", statuses: []string{"succeeded"}, secrets: []string{d.secret},
	}, "", "")
}

var devKeyLine = regexp.MustCompile(`^\s+(agent|auditor|admin)\s+(\S+)\s+(\S+)\s*$`)

// TestServeDev smoke-tests `gateway serve --dev`: one key per role printed,
// health endpoints up, and the roles enforced with the shipped default policy.
func TestServeDev(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var mu sync.Mutex
	keys := map[string]string{}
	ids := map[string]string{}
	g := startProcess(t, nil, startOptions{
		args: []string{"serve", "--dev", "--listen", "127.0.0.1:0"},
		dir:  dir,
		env:  gatewayEnv(),
		onStdoutLine: func(line string) {
			if m := devKeyLine.FindStringSubmatch(line); m != nil {
				mu.Lock()
				defer mu.Unlock()
				ids[m[1]], keys[m[1]] = m[2], m[3]
			}
		},
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(keys)
		mu.Unlock()
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve --dev printed keys for %d of 3 roles; stdout:\n%s", n, g.stdout.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if keys["agent"] == keys["auditor"] || keys["agent"] == keys["admin"] || len(keys["agent"]) < 16 {
		t.Errorf("dev keys are not distinct strong keys: %v", keys)
	}
	if !strings.Contains(g.stdout.String(), "curl") {
		t.Errorf("serve --dev printed no curl example:\n%s", g.stdout.String())
	}
	if _, err := os.Stat(filepath.Join(dir, ".portcullis")); err != nil {
		t.Errorf("serve --dev did not use ./.portcullis: %v", err)
	}

	cases := []struct {
		name   string
		path   string
		key    string
		status int
	}{
		{"healthz", "/healthz", "", 200},
		{"readyz", "/readyz", "", 200},
		{"agent lists tools", "/v1/tools", keys["agent"], 200},
		{"auditor lists receipts", "/v1/receipts", keys["auditor"], 200},
		{"agent lists receipts", "/v1/receipts", keys["agent"], 403},
		{"no key", "/v1/tools", "", 401},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := g.do(t, http.MethodGet, c.path, c.key, nil)
			if r.status != c.status {
				t.Fatalf("GET %s: got %s, want %d", c.path, r, c.status)
			}
		})
	}
	r := g.do(t, http.MethodGet, "/v1/tools", keys["agent"], nil)
	if !strings.Contains(string(r.body), `"tools"`) {
		t.Errorf("GET /v1/tools: no tools array: %s", r)
	} else {
		var body struct {
			Tools []map[string]any `json:"tools"`
		}
		if err := json.Unmarshal(r.body, &body); err != nil || body.Tools == nil {
			t.Errorf("GET /v1/tools: want {\"tools\": [...]}: %v %s", err, r)
		}
	}
	if err := g.stop(15 * time.Second); err != nil {
		t.Errorf("serve --dev exit after SIGTERM: %v, want 0", err)
	}
}

// TestKeysHash checks `gateway keys hash`, which operators use to fill
// api_key_sha256.
func TestKeysHash(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		args  []string
		stdin string
		want  string
	}{
		{"argument", []string{"keys", "hash", "pk_test_123"}, "", sha256Hex("pk_test_123")},
		{"stdin", []string{"keys", "hash", "-"}, "pk_from_stdin\n", sha256Hex("pk_from_stdin")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(gatewayBin, c.args...)
			cmd.Env = gatewayEnv()
			cmd.Stdin = strings.NewReader(c.stdin)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("gateway %v: %v", c.args, err)
			}
			sc := bufio.NewScanner(strings.NewReader(string(out)))
			sc.Scan()
			if got := strings.TrimSpace(sc.Text()); got != c.want {
				t.Errorf("gateway %v = %q, want %q", c.args, got, c.want)
			}
		})
	}
}
