package tests

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
)

// explorerSecret is an env value a call passes; evidence keeps it redacted,
// so neither the search nor an export may ever find or show it.
const explorerSecret = "s3cr3t-explorer-value-7731"

// allowDownloads lets the page's downloads land in a fresh directory, under
// the names the page gives them.
func allowDownloads(t *testing.T, br *browser) string {
	t.Helper()
	dir := t.TempDir()
	br.do("allow downloads", chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := chromedp.Call(ctx, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
			Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllow, DownloadPath: dir,
		})
		return err
	}))
	return dir
}

// exportFile clicks an export button and returns the downloaded file once
// Chromium has written it whole.
func exportFile(t *testing.T, br *browser, dir, button string) []byte {
	t.Helper()
	br.do("clear the last export", chromedp.Evaluate[chromedp.Void](`delete document.getElementById('export').dataset.state`))
	br.do("export", chromedp.Click(chromedp.CSS(button)))
	br.waitFor("the export", `document.getElementById('export').dataset.state === 'done'`)
	var name string
	br.eval(`document.getElementById('export').dataset.file`, &name)
	p := filepath.Join(dir, name)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		// Chromium writes name.crdownload and renames it when complete.
		if b, err := os.ReadFile(p); err == nil {
			_ = os.Remove(p)
			return b
		}
		if time.Now().After(deadline) {
			entries, _ := os.ReadDir(dir)
			t.Fatalf("download %s never appeared in %s (%v)", name, dir, entries)
		}
	}
}

// rowIDs are the receipt ids the table shows.
func rowIDs(br *browser) []string {
	var ids []string
	br.eval(`[...document.querySelectorAll('#results-body tr[data-id]')].map(tr => tr.dataset.id)`, &ids)
	slices.Sort(ids)
	return ids
}

// applySearch sets the text search (and decision) and waits for the table.
func applySearch(br *browser, q, decision string) {
	br.do("search "+q, selectValue("#f-q", q), selectValue("#f-decision", decision), chromedp.Click(chromedp.CSS("#apply-filters")))
	want := url.Values{"q": {q}}.Encode()
	br.waitFor("the search results", `document.getElementById('results').dataset.state === 'ready' && document.getElementById('results').dataset.query.includes('`+want+`')`)
}

// apiIDs are the ids the API lists for q.
func apiIDs(t *testing.T, g *gateway, q url.Values) []string {
	var ids []string
	for _, rc := range g.listReceipts(t, q) {
		ids = append(ids, rc.ID)
	}
	slices.Sort(ids)
	return ids
}

// checkSearchAndExport drives the text search, the reason column, the
// columns kept beside an open receipt and the exports. A denied receipt
// (denied, with reasons) is open when it starts.
func checkSearchAndExport(t *testing.T, br *browser, g *gateway, dir string, denied explorerCall, reasons []string, secretCall string) {
	t.Helper()
	// Beside the open receipt the table keeps its session and arguments
	// columns, and shows the denial reason.
	var cols struct {
		Session, Args, Reason bool
		ReasonText            string
	}
	br.eval(`(() => { const tr = document.querySelector('#results-body tr[data-id="`+denied.receiptID+`"]');
		const seen = (td) => !!td && getComputedStyle(td).display !== 'none' && td.getBoundingClientRect().width > 20;
		const tds = tr.querySelectorAll('td');
		return {Session: seen(tds[7]) && tds[7].textContent === '`+denied.session+`', Args: seen(tr.querySelector('.args-cell')),
			Reason: seen(tr.querySelector('.reason-cell')), ReasonText: tr.querySelector('.reason-cell').textContent}; })()`, &cols)
	if !cols.Session || !cols.Args || !cols.Reason || cols.ReasonText != strings.Join(reasons, "; ") {
		t.Errorf("with a receipt open: session shown %v, args shown %v, reason shown %v %q (want %q)", cols.Session, cols.Args, cols.Reason, cols.ReasonText, strings.Join(reasons, "; "))
	}

	// Search the reasons: what the API finds, the denied call among them.
	words := strings.Fields(reasons[0])
	reasonQ := strings.Join(words[:min(3, len(words))], " ")
	applySearch(br, strings.ToUpper(reasonQ), "deny")
	want := apiIDs(t, g, url.Values{"q": {reasonQ}, "decision": {"deny"}, "limit": {"25"}})
	if got := rowIDs(br); len(want) == 0 || !slices.Contains(want, denied.receiptID) || !slices.Equal(got, want) {
		t.Errorf("search %q (deny) shows %v, want %v with %s", reasonQ, got, want, denied.receiptID)
	}
	br.screenshot("explorer-search-export.png")

	// Export CSV of that filter: exactly those receipts, with the reasons.
	rows, err := csv.NewReader(strings.NewReader(string(exportFile(t, br, dir, "#export-csv")))).ReadAll()
	if err != nil || len(rows) != len(want)+1 || rows[0][0] != "id" || rows[0][7] != "reasons" {
		t.Fatalf("CSV export: %v, %d rows (want %d + header): %v", err, len(rows), len(want), rows)
	}
	var exported []string
	for _, r := range rows[1:] {
		exported = append(exported, r[0])
		if r[0] == denied.receiptID && r[7] != strings.Join(reasons, "; ") {
			t.Errorf("CSV reasons %q, want %q", r[7], reasons)
		}
	}
	slices.Sort(exported)
	if !slices.Equal(exported, want) {
		t.Errorf("CSV export ids %v, want %v", exported, want)
	}

	// Search the arguments: the env name finds the call, its secret value
	// (redacted in evidence) finds nothing, and the JSONL export of the
	// call carries the redacted copy only.
	applySearch(br, explorerSecret, "")
	if got := rowIDs(br); len(got) != 0 {
		t.Errorf("searching a redacted secret found %v", got)
	}
	applySearch(br, "EXPLORER_DEPLOY_TOKEN", "")
	if got := rowIDs(br); !slices.Equal(got, []string{secretCall}) {
		t.Errorf("search EXPLORER_DEPLOY_TOKEN shows %v, want [%s]", got, secretCall)
	}
	jsonl := exportFile(t, br, dir, "#export-jsonl")
	lines := strings.Split(strings.TrimSpace(string(jsonl)), "\n")
	var rc struct {
		ID   string         `json:"id"`
		Args map[string]any `json:"args"`
	}
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &rc) != nil || rc.ID != secretCall || rc.Args == nil {
		t.Fatalf("JSONL export: %q", jsonl)
	}
	if strings.Contains(string(jsonl), explorerSecret) || !strings.Contains(lines[0], "EXPLORER_DEPLOY_TOKEN") {
		t.Errorf("JSONL export is not the redacted copy: %s", jsonl)
	}
	br.do("clear the search", selectValue("#f-q", ""), selectValue("#f-decision", "deny"))
}
