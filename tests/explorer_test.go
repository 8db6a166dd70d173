package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/portcullis/portcullis/wire"
)

// The evidence explorer (/ui/, gateway/ui) driven in real headless Chromium
// against the real gateway binary: sign-in refusals, filtering, paging,
// a receipt's detail with its proof status, the chart, and that receipt
// data is rendered as text.
//
// Chromium is found at PORTCULLIS_CHROMIUM, else on PATH (chromium,
// chromium-browser, google-chrome). Missing, the test skips, or fails when
// PORTCULLIS_REQUIRE_CHROMIUM=1. With PORTCULLIS_UPDATE_SCREENSHOTS=1 the
// screenshots are written to docs/screenshots/ (checked in); otherwise to a
// temp dir.

// explorerXSS is a call argument an attacker controls; the explorer must
// show it as text and never parse it.
const explorerXSS = `<img src=x onerror="document.title='pwned';window.__pwned=1"><script>window.__pwned=2</script>`

// chromiumPath finds the browser or skips (fails when required).
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PORTCULLIS_CHROMIUM"); p != "" {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
		if os.Getenv("PORTCULLIS_REQUIRE_CHROMIUM") == "1" {
			t.Fatalf("PORTCULLIS_CHROMIUM=%s is not a file", p)
		}
		t.Skipf("PORTCULLIS_CHROMIUM=%s is not a file; skipping the browser test", p)
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome-stable", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("PORTCULLIS_REQUIRE_CHROMIUM") == "1" {
		t.Fatal("Chromium is required (PORTCULLIS_REQUIRE_CHROMIUM=1) but not found: set PORTCULLIS_CHROMIUM or install it (apt-get install chromium; scripts/test.sh does when root)")
	}
	t.Skip("Chromium not found: set PORTCULLIS_CHROMIUM or install it (apt-get install chromium; scripts/test.sh does when root); skipping the explorer browser test")
	return ""
}

// browser is one headless Chromium tab plus what its console said.
type browser struct {
	t       *testing.T
	ctx     context.Context
	mu      sync.Mutex
	console []chromedp.ConsoleMessage
	shots   string
}

func newBrowser(t *testing.T, bin string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		// In this closed network Chromium's own background traffic is
		// refused; these keep it from trying (the defaults already disable
		// background networking, sync and the first-run UI).
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("lang", "en-US"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 1000),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc() // kills the browser it started and waits for it
	})
	b := &browser{t: t, ctx: ctx}
	// The first Run starts the browser; it must not carry a timeout.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1440, 1000)); err != nil {
		t.Fatalf("start Chromium %s: %v", bin, err)
	}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.console = append(b.console, m)
			b.mu.Unlock()
		}
	}()
	b.shots = t.TempDir()
	if os.Getenv("PORTCULLIS_UPDATE_SCREENSHOTS") == "1" {
		b.shots = filepath.Join(repoRoot, "docs", "screenshots")
		if err := os.MkdirAll(b.shots, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// do runs actions with a bound.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v%s", what, err, b.consoleDump())
	}
}

// eval evaluates a JavaScript expression and decodes its value into v.
func (b *browser) eval(expr string, v any) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v%s", expr, err, b.consoleDump())
	}
	if err := json.Unmarshal(raw, v); err != nil {
		b.t.Fatalf("evaluate %s: decode %s: %v", expr, raw, err)
	}
}

func (b *browser) text(selector string) string {
	b.t.Helper()
	var s string
	b.eval(fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e ? e.textContent : "<no element>"; })()`, selector), &s)
	return s
}

// waitFor polls a JavaScript condition from the test side. (chromedp.Poll
// runs its predicate through new Function, which the explorer's CSP rightly
// refuses; DevTools' own evaluation is not subject to it.)
func (b *browser) waitFor(what, cond string) {
	b.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var ok bool
		b.eval("!!("+cond+")", &ok)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			var state string
			b.eval(`JSON.stringify({login: document.getElementById('login').dataset, loginError: document.getElementById('login-error').textContent,
				results: document.getElementById('results').dataset, appError: document.getElementById('app-error').textContent,
				chart: document.getElementById('chart').dataset, detail: document.getElementById('detail').dataset})`, &state)
			b.t.Fatalf("timed out waiting for %s (%s)\npage state: %s%s", what, cond, state, b.consoleDump())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (b *browser) screenshot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if len(png) < 8 || string(png[1:4]) != "PNG" {
		b.t.Fatalf("screenshot %s is not a PNG", name)
	}
	p := filepath.Join(b.shots, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s (%d bytes)", p, len(png))
}

func (b *browser) messages() []chromedp.ConsoleMessage {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.console)
}

func (b *browser) consoleDump() string {
	var sb strings.Builder
	for _, m := range b.messages() {
		fmt.Fprintf(&sb, "\n  console %s", m)
	}
	return sb.String()
}

// selectValue sets a <select> or <input> value (also to "", which
// chromedp.SetValue refuses), the way a form control's value changes.
func selectValue(sel, v string) chromedp.Action[chromedp.Void] {
	s, _ := json.Marshal(sel)
	val, _ := json.Marshal(v)
	return chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => { const e = document.querySelector(%s); e.value = %s; e.dispatchEvent(new Event('change', {bubbles: true})); })()`, s, val))
}

// explorerCall is one governed call the test makes and what it expects.
type explorerCall struct {
	principal string
	tool      string
	input     map[string]any
	decision  string
	receiptID string
	session   string
}

func TestExplorerBrowser(t *testing.T) {
	t.Parallel()
	bin := chromiumPath(t)

	d := newDeployment(t, storeSQLite)
	withCheckpoints(t, d)
	writeFile(t, filepath.Join(d.scratch, "notes.txt"), []byte("quarterly numbers\n"))
	// The suite's policy data, plus the file tools for agent-full.
	writeJSON(t, filepath.Join(d.bundleDir, "data.json"), map[string]any{"e2e": map[string]any{"principals": map[string]any{
		agentFull: map[string]any{
			"tools":     []string{"Exec", "fs.list", "fs.read"},
			"fs_grants": []map[string]string{{"path": "/usr", "mode": "r"}, {"path": d.scratch, "mode": "rw"}},
		},
		agentNoExec: map[string]any{"tools": []string{}},
		agentNarrow: map[string]any{"tools": []string{"Exec"}, "fs_grants": []map[string]string{{"path": d.narrow, "mode": "r"}}},
	}}})
	g := d.start(t)

	calls := []*explorerCall{
		{principal: agentFull, tool: "Exec", input: map[string]any{"argv": []string{"/usr/bin/true"}}, decision: "allow", session: "run-ui-1"},
		{principal: agentFull, tool: "fs.list", input: map[string]any{"path": d.scratch}, decision: "allow", session: "run-ui-1"},
		{principal: agentFull, tool: "fs.read", input: map[string]any{"path": filepath.Join(d.scratch, "notes.txt")}, decision: "allow", session: "run-ui-1"},
		{principal: agentNoExec, tool: "Exec", input: map[string]any{"argv": []string{"/usr/bin/true"}}, decision: "deny", session: "run-ui-2"},
		{principal: agentFull, tool: "Exec", input: map[string]any{"argv": []string{"/usr/bin/echo", explorerXSS}}, decision: "allow", session: "run-ui-1"},
		{principal: agentFull, tool: "fs.write", input: map[string]any{"path": filepath.Join(d.scratch, "x.txt"), "content": "x"}, decision: "deny", session: "run-ui-1"},
		{principal: agentFull, tool: "fs.read", input: map[string]any{"path": "/etc/hostname"}, decision: "deny", session: "run-ui-1"},
		{principal: agentFull, tool: "Exec", input: map[string]any{"argv": []string{"/usr/bin/true"}}, decision: "allow", session: "run-ui-3"},
		{principal: agentFull, tool: "Exec", input: map[string]any{"argv": []string{"relative/path"}}, decision: "invalid", session: "run-ui-3"},
		{principal: agentFull, tool: "fs.list", input: map[string]any{"path": d.scratch}, decision: "allow", session: "run-ui-3"},
		{principal: agentFull, tool: "Exec", input: map[string]any{"argv": []string{"/usr/bin/uname", "-s"}}, decision: "allow", session: "run-ui-3"},
		{principal: agentNoExec, tool: "fs.list", input: map[string]any{"path": "/"}, decision: "deny", session: "run-ui-2"},
		{principal: agentFull, tool: "Exec", input: map[string]any{"argv": []string{"/usr/bin/true"}, "env": map[string]string{"EXPLORER_DEPLOY_TOKEN": explorerSecret}}, decision: "allow", session: "run-ui-4"},
	}
	for i, c := range calls {
		res := g.call(t, d.keys[c.principal], map[string]any{"tool": c.tool, "input": c.input,
			"call_id": fmt.Sprintf("call-ui-%02d", i), "session_id": c.session})
		if res.ReceiptID == "" {
			t.Fatalf("call %d (%s %s): no receipt\n%s", i, c.principal, c.tool, res.response)
		}
		c.receiptID = res.ReceiptID
	}
	want := map[string][]string{}
	for _, c := range calls {
		want[c.decision] = append(want[c.decision], c.receiptID)
	}
	// The API's own answer first: the explorer must show exactly this.
	for dec, ids := range want {
		var got []string
		for _, rc := range g.listReceipts(t, url.Values{"decision": {dec}}) {
			got = append(got, rc.ID)
		}
		slices.Sort(got)
		slices.Sort(ids)
		if !slices.Equal(got, ids) {
			t.Fatalf("GET /v1/receipts?decision=%s = %v, want the test's %s calls %v", dec, got, dec, ids)
		}
	}
	// Wait until the checkpointer has covered every call, so the chart and
	// the proof status are deterministic.
	denied := calls[3]
	deniedRc, _ := g.getReceipt(t, denied.receiptID)
	var full wire.Receipt
	if err := json.Unmarshal([]byte(deniedRc.raw), &full); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		var stats wire.EvidenceStats
		r := g.do(t, http.MethodGet, "/v1/evidence/stats?interval=hour", d.keys[auditor], nil)
		_ = json.Unmarshal(r.body, &stats)
		var total int64
		for _, b := range stats.Buckets {
			total += b.Total
		}
		p := g.do(t, http.MethodGet, "/v1/receipts/"+denied.receiptID+"/proof", d.keys[auditor], nil)
		if total == int64(len(calls)) && p.status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("checkpoints never covered the calls: stats total %d of %d, proof %s", total, len(calls), p)
		}
	}

	br := newBrowser(t, bin)
	downloads := allowDownloads(t, br)
	page := g.baseURL + "/ui/"
	br.do("open the explorer", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#login-form")))

	// An agent key is refused: agents may not read receipts.
	br.do("sign in as an agent", chromedp.SendKeys(chromedp.CSS("#api-key"), d.keys[agentFull]), chromedp.Click(chromedp.CSS("#login-submit")))
	br.waitFor("the agent key to be refused", `document.getElementById('login').dataset.state === 'refused'`)
	if msg := br.text("#login-error"); !strings.Contains(msg, "403") || !strings.Contains(msg, "auditor role") || !strings.Contains(msg, "Agent keys") {
		t.Errorf("agent key refusal says %q; want the 403 and that the auditor role is needed", msg)
	}
	var leaked struct {
		Stored *string `json:"stored"`
		App    bool    `json:"app"`
		URL    string  `json:"url"`
		Cookie string  `json:"cookie"`
	}
	br.eval(`({stored: sessionStorage.getItem('portcullis.explorer.key'), app: !document.getElementById('app').hidden, url: location.href, cookie: document.cookie})`, &leaked)
	if leaked.Stored != nil || leaked.App || leaked.Cookie != "" || strings.Contains(leaked.URL, d.keys[agentFull]) {
		t.Errorf("after a refused key: stored=%v app shown=%v cookie=%q url=%q; the refused key must not be kept or shown past", leaked.Stored, leaked.App, leaked.Cookie, leaked.URL)
	}
	br.screenshot("explorer-login-refused.png")

	// An unknown key: 401.
	br.do("sign in with an unknown key", selectValue("#api-key", "pk_not_a_key"), chromedp.Click(chromedp.CSS("#login-submit")))
	br.waitFor("the unknown key to be refused", `document.getElementById('login-error').textContent.includes('401')`)

	// The auditor signs in.
	br.do("sign in as the auditor", selectValue("#api-key", d.keys[auditor]), chromedp.Click(chromedp.CSS("#login-submit")))
	br.waitFor("the receipts table", `document.getElementById('results').dataset.state === 'ready'`)
	br.eval(`({stored: sessionStorage.getItem('portcullis.explorer.key'), app: !document.getElementById('app').hidden, url: location.href, cookie: document.cookie})`, &leaked)
	if leaked.Stored == nil || *leaked.Stored != d.keys[auditor] || !leaked.App {
		t.Errorf("after signing in: stored key ok=%v app shown=%v; want the key in sessionStorage and the app shown", leaked.Stored != nil && *leaked.Stored == d.keys[auditor], leaked.App)
	}
	if leaked.Cookie != "" || strings.Contains(leaked.URL, d.keys[auditor]) {
		t.Errorf("the key leaked into a cookie (%q) or the URL (%q)", leaked.Cookie, leaked.URL)
	}
	var value string
	br.eval(`document.getElementById('api-key').value`, &value)
	if value != "" {
		t.Error("the key input still holds the key after sign-in")
	}

	// The chart: per tool, one bar segment per decision, from the stats'
	// by_tool_decision; a legend of tools and one of decisions.
	br.waitFor("the chart", `document.getElementById('chart').dataset.state === 'ready'`)
	var chart struct {
		Counts    map[string]map[string]int `json:"counts"`
		Total     int                       `json:"total"`
		Bars      int                       `json:"bars"`
		Legend    []string                  `json:"legend"`
		Decisions []string                  `json:"decisions"`
	}
	br.eval(`(() => {
		const bars = [...document.querySelectorAll('#chart-svg rect.bar')];
		const counts = {};
		for (const b of bars) {
			counts[b.dataset.series] = counts[b.dataset.series] || {};
			counts[b.dataset.series][b.dataset.decision] = (counts[b.dataset.series][b.dataset.decision] || 0) + Number(b.dataset.count);
		}
		return {counts, total: bars.reduce((n, b) => n + Number(b.dataset.count), 0), bars: bars.length,
			legend: [...document.querySelectorAll('#chart-legend li')].map(li => li.dataset.series).sort(),
			decisions: [...document.querySelectorAll('#chart-legend-decisions li')].map(li => li.dataset.decision)};
	})()`, &chart)
	wantCounts := map[string]map[string]int{}
	for _, c := range calls {
		if wantCounts[c.tool] == nil {
			wantCounts[c.tool] = map[string]int{}
		}
		wantCounts[c.tool][c.decision]++
	}
	var wantTools []string
	for tool := range wantCounts {
		wantTools = append(wantTools, tool)
	}
	slices.Sort(wantTools)
	if !reflect.DeepEqual(chart.Counts, wantCounts) || chart.Total != len(calls) || !slices.Equal(chart.Legend, wantTools) {
		t.Errorf("chart bars: per tool and decision %v (legend %v) totalling %d in %d rects; want %v totalling %d",
			chart.Counts, chart.Legend, chart.Total, chart.Bars, wantCounts, len(calls))
	}
	if !slices.Equal(chart.Decisions, []string{"allow", "deny", "invalid"}) {
		t.Errorf("decision legend %v, want allow, deny, invalid", chart.Decisions)
	}
	if s := br.text("#chart-summary"); !strings.Contains(s, fmt.Sprintf("%d decisions", len(calls))) ||
		!strings.Contains(s, fmt.Sprintf("%d deny", len(want["deny"]))) {
		t.Errorf("chart summary %q", s)
	}

	// Top rules for the range: the most frequent rule ids of the calls'
	// receipts (as the API records them), the denied call's among them.
	ruleCount := map[string]int{}
	for _, c := range calls {
		rc, _ := g.getReceipt(t, c.receiptID)
		var r wire.Receipt
		if err := json.Unmarshal([]byte(rc.raw), &r); err != nil {
			t.Fatal(err)
		}
		for _, id := range slices.Compact(slices.Sorted(slices.Values(r.RuleIDs))) {
			ruleCount[id]++
		}
	}
	var topRules []struct {
		Rule  string `json:"rule"`
		Count string `json:"count"`
	}
	br.eval(`[...document.querySelectorAll('#top-rules li[data-rule]')].map(li => ({rule: li.dataset.rule, count: li.querySelector('.count').textContent}))`, &topRules)
	var shownRules []string
	for _, r := range topRules {
		shownRules = append(shownRules, r.Rule)
		if r.Count != fmt.Sprint(ruleCount[r.Rule]) {
			t.Errorf("top rule %s shows %s decisions, the receipts have %d", r.Rule, r.Count, ruleCount[r.Rule])
		}
	}
	if len(full.RuleIDs) == 0 || !slices.Contains(shownRules, full.RuleIDs[0]) || len(topRules) == 0 || len(topRules) > 6 {
		t.Errorf("top rules %v (receipts' counts %v); want at most 6, with the denied call's %v", topRules, ruleCount, full.RuleIDs)
	}
	for i := 1; i < len(topRules); i++ {
		if ruleCount[topRules[i].Rule] > ruleCount[topRules[i-1].Rule] {
			t.Errorf("top rules not most frequent first: %v", topRules)
		}
	}

	// Every receipt is listed (12 > one page of 10: paging by cursor).
	br.do("ten per page", selectValue("#f-limit", "10"), chromedp.Click(chromedp.CSS("#apply-filters")))
	br.waitFor("page 1 of 10", `document.getElementById('results').dataset.state === 'ready' && document.getElementById('results').dataset.query.includes('limit=10')`)
	var page1, page2 []string
	br.eval(`[...document.querySelectorAll('#results-body tr[data-id]')].map(tr => tr.dataset.id)`, &page1)
	br.do("next page", chromedp.Click(chromedp.CSS("#page-next")))
	br.waitFor("page 2", `document.getElementById('results').dataset.state === 'ready' && document.getElementById('results').dataset.page === '2'`)
	br.eval(`[...document.querySelectorAll('#results-body tr[data-id]')].map(tr => tr.dataset.id)`, &page2)
	var nextDisabled bool
	br.eval(`document.getElementById('page-next').disabled`, &nextDisabled)
	all := append(slices.Clone(page1), page2...)
	var wantAll []string
	for _, c := range calls {
		wantAll = append(wantAll, c.receiptID)
	}
	slices.Sort(all)
	slices.Sort(wantAll)
	if len(page1) != 10 || !slices.Equal(all, wantAll) || !nextDisabled {
		t.Errorf("pages: %d + %d receipts, next disabled %v; want 10 + %d covering every call", len(page1), len(page2), nextDisabled, len(calls)-10)
	}

	// The receipt with HTML in its argv is shown as text.
	xss := calls[4].receiptID
	br.do("reset filters", chromedp.Click(chromedp.CSS("#reset-filters")))
	br.waitFor("the unfiltered list", `document.getElementById('results').dataset.state === 'ready' && document.getElementById('results').dataset.query === 'limit=25'`)
	br.do("open the receipt with HTML in argv", chromedp.Click(chromedp.CSS(`#results-body tr[data-id="`+xss+`"] td:nth-child(2)`)))
	br.waitFor("its detail", `document.getElementById('detail').dataset.state === 'ready' && document.getElementById('detail').dataset.id === '`+xss+`'`)
	var inj struct {
		Imgs   int    `json:"imgs"`
		Pwned  any    `json:"pwned"`
		Title  string `json:"title"`
		Args   string `json:"args"`
		Cell   string `json:"cell"`
		Script int    `json:"script"`
	}
	br.eval(`({imgs: document.querySelectorAll('img[src="x"]').length, pwned: window.__pwned === undefined ? null : window.__pwned,
		title: document.title, args: document.querySelector('#detail [data-field="args"]').textContent,
		cell: document.querySelector('#results-body tr[data-id="`+xss+`"] .args-cell').textContent,
		script: document.querySelectorAll('script').length})`, &inj)
	if inj.Imgs != 0 || inj.Pwned != nil || inj.Title != "Portcullis · Evidence explorer" || inj.Script != 1 {
		t.Errorf("HTML from a receipt was parsed: img[src=x]=%d __pwned=%v title=%q scripts=%d", inj.Imgs, inj.Pwned, inj.Title, inj.Script)
	}
	if !strings.Contains(inj.Args, `<img src=x onerror=\"document.title='pwned'`) || !strings.Contains(inj.Cell, explorerXSS) {
		t.Errorf("the argv is not shown as text:\ndetail: %s\ntable cell: %s", inj.Args, inj.Cell)
	}

	// A time range: since the 7th call's receipt time (inclusive, to the
	// microsecond) shows it and the calls after it.
	seventh, _ := g.getReceipt(t, calls[6].receiptID)
	br.do("filter since", selectValue("#f-since", seventh.Time), chromedp.Click(chromedp.CSS("#apply-filters")))
	br.waitFor("the receipts since the 7th call", `document.getElementById('results').dataset.state === 'ready' && document.getElementById('results').dataset.query.includes('since=')`)
	var since, wantSince []string
	br.eval(`[...document.querySelectorAll('#results-body tr[data-id]')].map(tr => tr.dataset.id)`, &since)
	for _, c := range calls[6:] {
		wantSince = append(wantSince, c.receiptID)
	}
	slices.Sort(since)
	slices.Sort(wantSince)
	if !slices.Equal(since, wantSince) {
		t.Errorf("since=%s shows %v, want the last %d calls %v", seventh.Time, since, len(wantSince), wantSince)
	}
	br.do("a bad time", selectValue("#f-since", "yesterday"), chromedp.Click(chromedp.CSS("#apply-filters")))
	br.waitFor("the bad time to be refused", `document.getElementById('results').dataset.state === 'error'`)
	if msg := br.text("#app-error"); !strings.Contains(msg, "RFC 3339") {
		t.Errorf("bad since: %q", msg)
	}
	br.do("clear since", selectValue("#f-since", ""))

	// Filter decision=deny: exactly the denied receipts.
	br.do("filter deny", selectValue("#f-decision", "deny"), chromedp.Click(chromedp.CSS("#apply-filters")))
	br.waitFor("the denied receipts", `document.getElementById('results').dataset.state === 'ready' && document.getElementById('results').dataset.query.includes('decision=deny')`)
	var rows []struct {
		ID       string `json:"id"`
		Decision string `json:"decision"`
	}
	br.eval(`[...document.querySelectorAll('#results-body tr[data-id]')].map(tr => ({id: tr.dataset.id, decision: tr.dataset.decision}))`, &rows)
	var shown []string
	for _, r := range rows {
		shown = append(shown, r.ID)
		if r.Decision != "deny" {
			t.Errorf("row %s has decision %q under decision=deny", r.ID, r.Decision)
		}
	}
	slices.Sort(shown)
	wantDeny := slices.Clone(want["deny"])
	slices.Sort(wantDeny)
	if !slices.Equal(shown, wantDeny) {
		t.Errorf("decision=deny shows %v, want exactly %v", shown, wantDeny)
	}

	// Open one: decision, reasons, trace id, scope, outcome, proof status.
	br.do("open a denied receipt", chromedp.Click(chromedp.CSS(`#results-body tr[data-id="`+denied.receiptID+`"] button.btn-link`)))
	br.waitFor("the denied receipt's detail", `document.getElementById('detail').dataset.state === 'ready' && document.getElementById('detail').dataset.id === '`+denied.receiptID+`'`)
	br.waitFor("its proof status", `document.getElementById('proof') && document.getElementById('proof').dataset.state !== 'loading'`)
	detail := map[string]string{}
	br.eval(`Object.fromEntries([...document.querySelectorAll('#detail [data-field]')].map(e => [e.dataset.field, e.textContent.trim()]))`, &detail)
	checks := map[string]string{
		"decision":       "deny",
		"trace_id":       full.TraceID,
		"id":             denied.receiptID,
		"principal_id":   agentNoExec,
		"session_id":     "run-ui-2",
		"proof_status":   "included",
		"outcome_status": full.Outcome.Status,
		"error_code":     *full.Outcome.ErrorCode,
		"rule_ids":       "e2e.no_grant", // testdata/policy/e2e.rego's default decision
	}
	for field, v := range checks {
		if detail[field] != v {
			t.Errorf("detail %s = %q, want %q", field, detail[field], v)
		}
	}
	if len(full.Reasons) == 0 || !strings.Contains(detail["reasons"], full.Reasons[0]) {
		t.Errorf("detail reasons %q, want the receipt's %q", detail["reasons"], full.Reasons)
	}
	if full.Chain == nil || !strings.Contains(detail["chain"], fmt.Sprintf("seq %d", full.Chain.Seq)) {
		t.Errorf("detail chain %q, receipt chain %+v", detail["chain"], full.Chain)
	}
	if !strings.Contains(detail["scope"], "not allowed") || !strings.Contains(detail["policy_revision"], full.PolicyRevision) {
		t.Errorf("detail scope %q / policy revision %q (want %q)", detail["scope"], detail["policy_revision"], full.PolicyRevision)
	}
	var loc string
	br.eval(`location.href`, &loc)
	if !strings.HasSuffix(loc, "#receipt="+denied.receiptID) || strings.Contains(loc, d.keys[auditor]) {
		t.Errorf("location %q", loc)
	}
	br.screenshot("explorer-deny-filter-detail.png")
	checkSearchAndExport(t, br, g, downloads, *denied, full.Reasons, calls[len(calls)-1].receiptID)

	// Filter by rule id from its top-rules chip: exactly the receipts the
	// API finds for it.
	br.do("filter by rule from the top rules", chromedp.Click(chromedp.CSS(`#top-rules button[data-rule="e2e.no_grant"]`)))
	br.waitFor("the rule's receipts", `document.getElementById('results').dataset.state === 'ready' && document.getElementById('results').dataset.query.includes('rule=e2e.no_grant')`)
	var byRule, wantRule []string
	br.eval(`[...document.querySelectorAll('#results-body tr[data-id]')].map(tr => tr.dataset.id)`, &byRule)
	for _, rc := range g.listReceipts(t, url.Values{"rule": {"e2e.no_grant"}, "limit": {"25"}}) {
		wantRule = append(wantRule, rc.ID)
	}
	slices.Sort(byRule)
	slices.Sort(wantRule)
	if len(wantRule) == 0 || !slices.Contains(wantRule, denied.receiptID) || !slices.Equal(byRule, wantRule) {
		t.Errorf("rule=e2e.no_grant shows %v, want %v (with %s)", byRule, wantRule, denied.receiptID)
	}
	br.do("clear rule", selectValue("#f-rule", ""))

	// An allowed call's detail shows its enforced scope; screenshot of the
	// overview with it open.
	allowed := calls[2]
	br.do("clear filters", chromedp.Click(chromedp.CSS("#reset-filters")))
	br.waitFor("the unfiltered list again", `document.getElementById('results').dataset.state === 'ready' && document.getElementById('results').dataset.query === 'limit=25'`)
	br.do("open an allowed receipt", chromedp.Click(chromedp.CSS(`#results-body tr[data-id="`+allowed.receiptID+`"] td:nth-child(3)`)))
	br.waitFor("the allowed receipt's detail", `document.getElementById('detail').dataset.id === '`+allowed.receiptID+`' && document.getElementById('proof') && document.getElementById('proof').dataset.state !== 'loading'`)
	if s := br.text(`#detail [data-field="scope"]`); !strings.Contains(s, d.scratch) || !strings.Contains(s, "rw") {
		t.Errorf("allowed receipt scope %q does not show the grant %s rw", s, d.scratch)
	}
	if s := br.text(`#detail [data-field="outcome_status"]`); s != "succeeded" {
		t.Errorf("allowed receipt outcome %q", s)
	}
	br.do("scroll to top", chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))
	br.screenshot("explorer-receipt-allowed.png")

	// Closed, the table has its room back (all columns, arguments as text).
	br.do("close the receipt", chromedp.Click(chromedp.CSS("#detail-close")))
	br.waitFor("the detail to close", `document.getElementById('detail').hidden && location.hash === ''`)
	br.do("scroll to top", chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))
	br.screenshot("explorer-overview.png")

	// Sign out: the key and the data are gone.
	br.do("sign out", chromedp.Click(chromedp.CSS("#logout")))
	br.waitFor("the login form", `!document.getElementById('login').hidden && document.getElementById('app').hidden`)
	var after struct {
		Stored *string `json:"stored"`
		Rows   int     `json:"rows"`
		Bars   int     `json:"bars"`
	}
	br.eval(`({stored: sessionStorage.getItem('portcullis.explorer.key'), rows: document.querySelectorAll('#results-body tr').length, bars: document.querySelectorAll('#chart rect').length})`, &after)
	if after.Stored != nil || after.Rows != 0 || after.Bars != 0 {
		t.Errorf("after sign-out: stored key %v, %d rows, %d bars left", after.Stored != nil, after.Rows, after.Bars)
	}

	// A gateway without checkpoints: the chart and the proof say why they
	// are missing instead of failing.
	d2 := newDeployment(t, storeSQLite)
	g2 := d2.start(t)
	plain := g2.call(t, d2.keys[agentFull], execCall(map[string]any{"argv": []string{"/usr/bin/true"}}, "call-plain", "run-plain"))
	if plain.ReceiptID == "" {
		t.Fatalf("call on the gateway without checkpoints: %s", plain.response)
	}
	br.do("open the second gateway's explorer", chromedp.Navigate(g2.baseURL+"/ui/"), chromedp.WaitVisible(chromedp.CSS("#login-form")),
		selectValue("#api-key", d2.keys[auditor]), chromedp.Click(chromedp.CSS("#login-submit")))
	br.waitFor("the chart to say checkpoints are off", `document.getElementById('chart').dataset.state === 'unavailable'`)
	if s := br.text("#chart"); !strings.Contains(s, "checkpoints are off") {
		t.Errorf("chart without checkpoints says %q", s)
	}
	br.waitFor("the receipt", `document.querySelector('#results-body tr[data-id="`+plain.ReceiptID+`"]')`)
	br.do("open it", chromedp.Click(chromedp.CSS(`#results-body tr[data-id="`+plain.ReceiptID+`"] td:nth-child(2)`)))
	br.waitFor("its proof status", `document.getElementById('proof') && document.getElementById('proof').dataset.state !== 'loading'`)
	if s := br.text(`#detail [data-field="proof_status"]`); s != "unavailable" {
		t.Errorf("proof status without checkpoints = %q, want unavailable", s)
	}

	// The page ran under its CSP without a violation or an error.
	for _, m := range br.messages() {
		text := m.Text
		switch {
		case m.IsException(),
			strings.Contains(text, "Content Security Policy"),
			strings.Contains(text, "Trusted"),
			strings.Contains(text, "Refused"):
			t.Errorf("browser console: %s", m)
		case m.Type == chromedp.ConsoleError && !strings.Contains(text, "status of 40") && !strings.Contains(text, "status of 503"):
			// The refused sign-ins log 401/403, a pending proof 412, the
			// gateway without checkpoints 503; anything else is unexpected.
			t.Errorf("browser console: %s", m)
		}
	}
}
