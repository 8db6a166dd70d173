package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/evidence/postgres"
	"github.com/portcullis/portcullis/evidence/sqlite"
	"github.com/portcullis/portcullis/wire"
)

// runCLICode runs the gateway binary and returns its output and exit code.
func runCLICode(t *testing.T, d *deployment, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, gatewayBin, args...)
	cmd.Dir, cmd.Env = d.dir, d.env
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("gateway %v: %v", args, err)
	}
	return string(out), 0
}

// seedOldCall writes one call dated at into the deployment's store, as an
// earlier gateway process would have.
func seedOldCall(t *testing.T, d *deployment, at time.Time) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	var st evidence.Store
	if d.store == storePostgres {
		pg, err := postgres.Open(ctx, d.dbURL)
		if err != nil {
			t.Fatal(err)
		}
		if err := pg.EnsurePartitions(ctx, at); err != nil {
			t.Fatal(err)
		}
		st = pg
	} else {
		sq, err := sqlite.Open(ctx, filepath.Join(d.dataDir, "evidence.db"))
		if err != nil {
			t.Fatal(err)
		}
		st = sq
	}
	defer st.Close()
	var clock atomic.Int64
	clock.Store(at.UnixMicro())
	w := evidence.NewWriter(st, evidence.WriterOptions{InstanceID: "old-" + d.instanceID,
		Now: func() time.Time { return time.UnixMicro(clock.Add(1000)) }})
	id := uuid.Must(uuid.NewV7())
	if err := w.Append(ctx,
		evidence.Event{ID: id, Kind: evidence.KindDecision, Decision: wire.DecisionAllow, Tool: "Exec", PrincipalID: agentFull},
		evidence.Event{Kind: evidence.KindOutcome, ReceiptID: id, Outcome: &wire.Outcome{Status: wire.StatusSucceeded}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestLegalHoldBlocksRetain: the real binary on each store. Evidence from
// three months ago is past evidence.retention (30d); an admin places a
// legal hold on that month through the API, and `gateway evidence retain`
// refuses to drop it, exiting 3 and naming the hold and its reason, while
// `evidence verify` passes. After the admin releases the hold through the
// API, retain drops the month and verify still passes.
func TestLegalHoldBlocksRetain(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, d *deployment) {
		vkey := withCheckpoints(t, d)
		f, err := os.OpenFile(d.configPath, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(f, "  retention: 30d\n")
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		old := time.Date(time.Now().Year(), time.Now().Month(), 10, 12, 0, 0, 0, time.UTC).AddDate(0, -3, 0)
		oldID := seedOldCall(t, d, old)
		g := d.start(t)

		const reason = "Doe v. Acme, 24-cv-1234: litigation hold"
		r := g.do(t, "POST", "/v1/evidence/holds", d.keys[admin], map[string]any{
			"since": evidence.MonthStart(old).Format(time.RFC3339), "until": evidence.MonthStart(old).AddDate(0, 1, 0).Format(time.RFC3339),
			"reason": reason,
		})
		if r.status != 201 {
			t.Fatalf("place hold: %s", r)
		}
		var h wire.Hold
		if err := json.Unmarshal(r.body, &h); err != nil || h.ID == "" || h.PlacedBy != admin {
			t.Fatalf("placed hold %s: %+v, %v", r.body, h, err)
		}
		if r := g.do(t, "POST", "/v1/evidence/holds", d.keys[auditor], map[string]any{"since": "2025-01-01T00:00:00Z", "reason": "x"}); r.status != 403 {
			t.Errorf("auditor placing a hold: %s; want 403", r)
		}
		if err := g.stop(10 * time.Second); err != nil {
			t.Logf("stop: %v", err)
		}

		out, code := runCLICode(t, d, "evidence", "retain", "--config", d.configPath)
		if code != 3 || !strings.Contains(out, "kept ") || !strings.Contains(out, h.ID) || !strings.Contains(out, reason) {
			t.Fatalf("evidence retain under a hold: exit %d, want 3 naming hold %s:\n%s", code, h.ID, out)
		}
		if out, passed := runCLI(t, d, "evidence", "verify", "--config", d.configPath, "--key", vkey); !passed || !strings.Contains(out, "OK") {
			t.Fatalf("evidence verify after a held retain:\n%s", out)
		}
		if out, passed := runCLI(t, d, "evidence", "hold", "list", "--config", d.configPath, "--active"); !passed || !strings.Contains(out, h.ID) {
			t.Fatalf("evidence hold list --active:\n%s", out)
		}

		g = d.start(t)
		if rc, ok := g.getReceipt(t, oldID.String()); !ok || rc.ID != oldID.String() {
			t.Fatalf("held receipt %s is gone", oldID)
		}
		if r := g.do(t, "POST", "/v1/evidence/holds/"+h.ID+"/release", d.keys[admin], map[string]any{"reason": "settled"}); r.status != 200 {
			t.Fatalf("release hold: %s", r)
		}
		if err := g.stop(10 * time.Second); err != nil {
			t.Logf("stop: %v", err)
		}
		out, code = runCLICode(t, d, "evidence", "retain", "--config", d.configPath)
		if code != 0 || !strings.Contains(out, "dropped ") {
			t.Fatalf("evidence retain after release: exit %d:\n%s", code, out)
		}
		if out, passed := runCLI(t, d, "evidence", "verify", "--config", d.configPath, "--key", vkey); !passed || !strings.Contains(out, "OK") {
			t.Fatalf("evidence verify after retain:\n%s", out)
		}
	})
}
