package tests

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/evidence/postgres"
	"github.com/portcullis/portcullis/evidence/sqlite"
)

// Load of TestEvidenceMultiproc: per gateway, mpClients concurrent clients
// each make mpCalls calls, alternating an allowed Exec and a denied one.
const (
	mpClients = 8
	mpCalls   = 24
)

// mpLeadingMsg is what a gateway logs when its checkpointer takes the lead.
const mpLeadingMsg = `"msg":"evidence checkpointer: leading"`

// TestEvidenceMultiproc runs two real gateway processes (different
// instance ids and ports) on one evidence database, on each store: one
// PostgreSQL database, and one SQLite file (WAL; the checkpointer is
// elected with a file lock). Both take governed calls at once. Then:
// every response has a receipt and every receipt a response, attributed to
// the instance that answered; each instance has its own chain starting with
// chain_start; exactly one checkpointer leads at a time and its checkpoints
// cover both chains; when the leader stops, the other takes over; `gateway
// evidence verify` (the real CLI) passes; and a restarted instance's new
// chain links to the head of its previous one.
func TestEvidenceMultiproc(t *testing.T) {
	t.Parallel()
	eachStoreKind(t, testMultiproc)
}

func testMultiproc(t *testing.T, st store) {
	d1 := newDeployment(t, st)
	vkey := withCheckpoints(t, d1)
	d2 := mpSecondInstance(t, d1)

	// Started one after the other only so the leader is known to be the
	// first; migrations are safe at once on both stores (goose's advisory
	// lock; a file lock on SQLite).
	g1 := d1.start(t)
	waitLog(t, g1, mpLeadingMsg, 20*time.Second)
	g2 := d2.start(t)
	gws := []*gateway{g1, g2}

	session := "mp-" + randHex(t, 4)
	sent := mpLoad(t, gws, session)

	// Receipts == responses, each from the instance that answered, and
	// each instance on one chain of its own.
	chainOf := map[string]string{} // instance id -> chain id
	got := mpReceipts(t, g2, session)
	if len(got) != len(sent) {
		t.Errorf("%d receipts in session %s, %d responses", len(got), session, len(sent))
	}
	for id, inst := range sent {
		rc, ok := got[id]
		switch {
		case !ok:
			t.Errorf("response receipt %s (from %s) is not listed", id, inst)
		case rc.InstanceID != inst:
			t.Errorf("receipt %s: instance %q, but %q answered", id, rc.InstanceID, inst)
		case rc.Chain == nil:
			t.Errorf("receipt %s has no chain", id)
		case chainOf[inst] == "":
			chainOf[inst] = rc.Chain.ID
		case chainOf[inst] != rc.Chain.ID:
			t.Errorf("instance %s wrote on chains %s and %s in one run", inst, chainOf[inst], rc.Chain.ID)
		}
	}
	for id := range got {
		if _, ok := sent[id]; !ok {
			t.Errorf("receipt %s has no response", id)
		}
	}
	if len(chainOf) != 2 || chainOf[d1.instanceID] == chainOf[d2.instanceID] {
		t.Fatalf("chains by instance = %v; want two distinct chains", chainOf)
	}

	// One leader at a time, and its checkpoints cover both chains: the
	// last receipt each instance wrote gets a proof.
	if n1, n2 := strings.Count(g1.stderr.String(), mpLeadingMsg), strings.Count(g2.stderr.String(), mpLeadingMsg); n1 != 1 || n2 != 0 {
		t.Fatalf("checkpointer took the lead %d times in gateway 1 and %d in gateway 2; want once, in 1 only", n1, n2)
	}
	for _, inst := range []string{d1.instanceID, d2.instanceID} {
		mpWaitProof(t, g2, mpLastReceipt(sent, got, inst), vkey)
	}

	// The leader stops; the other takes the lead and checkpoints what it
	// writes next.
	if err := g1.stop(15 * time.Second); err != nil {
		t.Fatalf("gateway 1 did not stop cleanly: %v", err)
	}
	waitLog(t, g2, mpLeadingMsg, 20*time.Second)
	after := g2.call(t, d2.keys[agentNoExec], execCall(map[string]any{"argv": []string{"/usr/bin/echo", "after"}}, "after", session))
	if after.ReceiptID == "" {
		t.Fatalf("call after the leader stopped: %s", after.response)
	}
	mpWaitProof(t, g2, after.ReceiptID, vkey)

	// Each chain as stored: it starts with chain_start and holds exactly
	// the instance's events of this run.
	s := mpOpenStore(t, d1)
	ctx := context.Background()
	head1 := mpChainHead(t, s, d1.instanceID)
	for inst, chain := range chainOf {
		evs, err := s.ChainEvents(ctx, uuid.MustParse(chain))
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 || evs[0].Kind != evidence.KindChainStart || evs[0].InstanceID != inst {
			t.Fatalf("chain %s of %s does not start with its chain_start: %+v", chain, inst, evs[:min(1, len(evs))])
		}
		for _, e := range evs {
			if e.InstanceID != inst {
				t.Errorf("chain %s of %s holds an event of %s", chain, inst, e.InstanceID)
			}
		}
		if err := evidence.VerifyChain(evs); err != nil {
			t.Errorf("chain %s of %s: %v", chain, inst, err)
		}
	}
	if head1.chain.String() != chainOf[d1.instanceID] {
		t.Fatalf("instance 1's head is on chain %s, want %s", head1.chain, chainOf[d1.instanceID])
	}

	// Restart instance 1: its new chain links to the head of the old one.
	g1 = d1.start(t)
	again := g1.call(t, d1.keys[agentNoExec], execCall(map[string]any{"argv": []string{"/usr/bin/echo", "again"}}, "again", session))
	if again.ReceiptID == "" {
		t.Fatalf("call after restart: %s", again.response)
	}
	rc := mpReceipt(t, g1, again.ReceiptID)
	if rc.Chain == nil || rc.Chain.ID == chainOf[d1.instanceID] {
		t.Fatalf("restarted instance wrote on chain %+v, want a new chain", rc.Chain)
	}
	evs, err := s.ChainEvents(ctx, uuid.MustParse(rc.Chain.ID))
	if err != nil || len(evs) < 2 || evs[0].Kind != evidence.KindChainStart {
		t.Fatalf("restarted chain %s: %d events, %v", rc.Chain.ID, len(evs), err)
	}
	var link evidence.ChainLink
	if err := json.Unmarshal(evs[0].Args, &link); err != nil {
		t.Fatal(err)
	}
	want := evidence.ChainLink{PrevChainID: head1.chain.String(), PrevChainSeq: head1.seq, PrevHash: hex.EncodeToString(head1.hash)}
	if link != want {
		t.Fatalf("restarted chain_start links to %+v, want the old head %+v", link, want)
	}
	mpWaitProof(t, g1, again.ReceiptID, vkey)

	// The real CLI verifies everything: three chains (instance 1's two,
	// instance 2's), every link and hash, every signed checkpoint.
	for _, g := range []*gateway{g1, g2} {
		if err := g.stop(15 * time.Second); err != nil {
			t.Fatalf("gateway did not stop cleanly: %v", err)
		}
	}
	out, ok := runCLI(t, d1, "evidence", "verify", "--config", d1.configPath, "--key", vkey, "--json")
	var rep evidence.Report
	if err := json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &rep); err != nil {
		t.Fatalf("evidence verify --json: %v\n%s", err, out)
	}
	if !ok || !rep.OK() || rep.Chains != 3 || rep.Checkpoints == 0 || rep.Leaves == 0 {
		t.Fatalf("evidence verify (exit ok=%v) = %+v; want OK with 3 chains and checkpoints\n%s", ok, rep, out)
	}
	// Two events per call, three chain starts, plus each start's
	// policy_activated.
	if minEvents := int64(2*(len(sent)+2) + 3); rep.Events < minEvents {
		t.Errorf("verify saw %d events, want at least %d", rep.Events, minEvents)
	}
}

// mpSecondInstance is a second gateway of d's deployment: same database
// (PostgreSQL) or same SQLite file (same data_dir), same keys, policy and
// signing key; its own instance id and config file. On PostgreSQL it gets
// its own data_dir, as a replica on another host would.
func mpSecondInstance(t *testing.T, d *deployment) *deployment {
	t.Helper()
	cfg, err := os.ReadFile(d.configPath)
	if err != nil {
		t.Fatal(err)
	}
	d2 := *d
	d2.instanceID = d.instanceID + "-b"
	d2.configPath = filepath.Join(d.dir, "portcullis-b.yaml")
	text := strings.Replace(string(cfg), "instance_id: "+strconv.Quote(d.instanceID), "instance_id: "+strconv.Quote(d2.instanceID), 1)
	if d.store == storePostgres {
		d2.dataDir = filepath.Join(d.dir, "data-b")
		if err := os.MkdirAll(d2.dataDir, 0o755); err != nil {
			t.Fatal(err)
		}
		text = strings.Replace(text, "data_dir: "+strconv.Quote(d.dataDir), "data_dir: "+strconv.Quote(d2.dataDir), 1)
	}
	if text == string(cfg) || !strings.Contains(text, strconv.Quote(d2.instanceID)) {
		t.Fatalf("could not derive the second instance's config from:\n%s", cfg)
	}
	writeFile(t, d2.configPath, []byte(text))
	return &d2
}

// mpLoad makes the calls from mpClients goroutines per gateway at once and
// returns, by receipt id, the instance that answered. Every call must be
// answered (200 allowed, 403 denied) with a receipt id.
func mpLoad(t *testing.T, gws []*gateway, session string) map[string]string {
	t.Helper()
	var (
		mu   sync.Mutex
		sent = map[string]string{}
		errs []string
		wg   sync.WaitGroup
	)
	for gi, g := range gws {
		for c := range mpClients {
			wg.Go(func() {
				for i := range mpCalls {
					key, argv := g.dep.keys[agentFull], []string{"/usr/bin/echo", "mp"}
					if i%2 == 1 {
						key = g.dep.keys[agentNoExec]
					}
					callID := fmt.Sprintf("g%d-c%d-%d", gi, c, i)
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					r, err := g.tryDo(ctx, http.MethodPost, "/v1/tool-calls", "Bearer "+key, execCall(map[string]any{"argv": argv}, callID, session))
					cancel()
					var body struct {
						ReceiptID string `json:"receipt_id"`
					}
					if err == nil {
						err = json.Unmarshal(r.body, &body)
					}
					mu.Lock()
					switch {
					case err != nil:
						errs = append(errs, fmt.Sprintf("%s: %v", callID, err))
					case body.ReceiptID == "" || (r.status != http.StatusOK && r.status != http.StatusForbidden):
						errs = append(errs, fmt.Sprintf("%s: HTTP %d without a receipt: %s", callID, r.status, r.body))
					default:
						sent[body.ReceiptID] = g.dep.instanceID
					}
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d of %d calls failed; first: %s", len(errs), len(gws)*mpClients*mpCalls, errs[0])
	}
	if want := len(gws) * mpClients * mpCalls; len(sent) != want {
		t.Fatalf("%d distinct receipt ids for %d calls", len(sent), want)
	}
	return sent
}

// mpRc is the part of a receipt this test reads.
type mpRc struct {
	ID         string `json:"id"`
	Time       string `json:"time"`
	InstanceID string `json:"instance_id"`
	Chain      *struct {
		ID   string `json:"id"`
		Seq  int64  `json:"seq"`
		Hash string `json:"hash"`
	} `json:"chain"`
}

// mpReceipts lists every receipt of the session, walking the pages.
func mpReceipts(t *testing.T, g *gateway, session string) map[string]mpRc {
	t.Helper()
	out := map[string]mpRc{}
	q := url.Values{"session_id": {session}, "limit": {"100"}}
	for page := 0; ; page++ {
		if page > 100 {
			t.Fatal("receipt pages do not end")
		}
		r := g.do(t, http.MethodGet, "/v1/receipts?"+q.Encode(), g.dep.keys[auditor], nil)
		if r.status != http.StatusOK {
			t.Fatalf("list receipts: %s", r)
		}
		var list struct {
			Receipts   []mpRc `json:"receipts"`
			NextCursor string `json:"next_cursor"`
		}
		if err := json.Unmarshal(r.body, &list); err != nil {
			t.Fatalf("decode receipts: %v", err)
		}
		for _, rc := range list.Receipts {
			if _, dup := out[rc.ID]; dup {
				t.Errorf("receipt %s listed twice", rc.ID)
			}
			out[rc.ID] = rc
		}
		if list.NextCursor == "" {
			return out
		}
		q.Set("cursor", list.NextCursor)
	}
}

func mpReceipt(t *testing.T, g *gateway, id string) mpRc {
	t.Helper()
	r := g.do(t, http.MethodGet, "/v1/receipts/"+url.PathEscape(id), g.dep.keys[auditor], nil)
	var rc mpRc
	if r.status != http.StatusOK || json.Unmarshal(r.body, &rc) != nil {
		t.Fatalf("receipt %s: %s", id, r)
	}
	return rc
}

// mpLastReceipt is the receipt of inst with the highest chain sequence.
func mpLastReceipt(sent map[string]string, got map[string]mpRc, inst string) string {
	var last mpRc
	for id, in := range sent {
		if rc := got[id]; in == inst && rc.Chain != nil && (last.Chain == nil || rc.Chain.Seq > last.Chain.Seq) {
			last = rc
		}
	}
	return last.ID
}

// mpWaitProof waits until the receipt's proof verifies offline with vkey:
// a signed checkpoint covers its decision and outcome.
func mpWaitProof(t *testing.T, g *gateway, id, vkey string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := g.do(t, http.MethodGet, "/v1/receipts/"+url.PathEscape(id)+"/proof", g.dep.keys[auditor], nil)
		if r.status == http.StatusOK {
			var p struct {
				Decision evidence.InclusionProof  `json:"decision"`
				Outcome  *evidence.InclusionProof `json:"outcome"`
			}
			if err := json.Unmarshal(r.body, &p); err != nil || p.Outcome == nil {
				t.Fatalf("proof of %s: %v\n%s", id, err, r)
			}
			for _, ip := range []evidence.InclusionProof{p.Decision, *p.Outcome} {
				if err := evidence.VerifyInclusion(ip, vkey); err != nil {
					t.Fatalf("proof of %s does not verify: %v", id, err)
				}
			}
			return
		}
		if r.status != http.StatusPreconditionFailed {
			t.Fatalf("proof of %s: %s", id, r)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint covered receipt %s within 30 s", id)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitLog waits until g's stderr holds want.
func waitLog(t *testing.T, g *gateway, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(g.stderr.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("gateway did not log %s within %s", want, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// mpOpenStore opens the deployment's evidence store from the test process,
// read-mostly, closed when t ends.
func mpOpenStore(t *testing.T, d *deployment) evidence.Store {
	t.Helper()
	ctx := context.Background()
	var (
		s   evidence.Store
		err error
	)
	if d.store == storePostgres {
		s, err = postgres.Open(ctx, d.dbURL)
	} else {
		s, err = sqlite.Open(ctx, filepath.Join(d.dataDir, "evidence.db"))
	}
	if err != nil {
		t.Fatalf("open the evidence store: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

type mpHead struct {
	chain uuid.UUID
	seq   int64
	hash  []byte
}

func mpChainHead(t *testing.T, s evidence.Store, inst string) mpHead {
	t.Helper()
	c, seq, h, err := s.ChainHead(context.Background(), inst)
	if err != nil || c == uuid.Nil {
		t.Fatalf("chain head of %s: %s, %v", inst, c, err)
	}
	return mpHead{c, seq, h}
}
