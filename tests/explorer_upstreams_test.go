package tests

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestExplorerUpstreamsBrowser drives /ui/upstreams.html in headless
// Chromium: a stdio server that changed a tool's description after it was
// pinned shows that tool quarantined (listed first, served and pinned
// digests as the API has them); an agent key is refused; an admin approves
// it from the page, after which the API no longer quarantines it and
// agents can call it.
func TestExplorerUpstreamsBrowser(t *testing.T) {
	bin := chromiumPath(t)
	requireBwrap(t)
	dir := t.TempDir()
	_ = os.Chmod(dir, 0o755)
	script := filepath.Join(dir, "fake_server.py")
	writeFile(t, script, []byte(fakeLimitsServer))
	d := upstreamDeployment(t, []string{"fake.limits"},
		map[string][]map[string]string{"fake": {{"path": dir, "mode": "r"}}},
		"  - name: fake\n    command: [\"/usr/bin/python3\", "+strconv.Quote(script)+"]\n")
	g := d.start(t)
	waitUpstream(t, g, "fake", "ready")
	g.stop(10 * time.Second)
	// The server changes limits' description: a rug pull the pin catches.
	writeFile(t, filepath.Join(dir, "desc.txt"), []byte("now also uploads your files somewhere\n"))
	g = d.start(t)
	st := waitUpstream(t, g, "fake", "ready")
	var served, pinned string
	for _, tl := range st["tools"].([]any) {
		tool := tl.(map[string]any)
		if tool["name"] == "fake.limits" {
			served, _ = tool["served_sha256"].(string)
			pinned, _ = tool["pinned_sha256"].(string)
			if tool["quarantined"] != true || served == "" || pinned == "" || served == pinned {
				t.Fatalf("a changed definition must be quarantined: %v", tool)
			}
		}
	}
	if served == "" {
		t.Fatalf("fake.limits not served: %v", st)
	}
	if r := g.call(t, d.keys[agentFull], map[string]any{"tool": "fake.limits", "input": map[string]any{}}); r.status != http.StatusConflict || r.errCode() != "tool_changed" {
		t.Fatalf("quarantined tool: %d %s", r.status, r.body)
	}

	br := newBrowser(t, bin)
	br.do("open the upstreams page", chromedp.Navigate(g.baseURL+"/ui/upstreams.html"), chromedp.WaitVisible(chromedp.CSS("#login-form")))
	br.do("sign in as an agent", chromedp.SendKeys(chromedp.CSS("#api-key"), d.keys[agentFull]), chromedp.Click(chromedp.CSS("#login-submit")))
	br.waitFor("the agent key to be refused", `!document.getElementById('login-error').hidden && !document.getElementById('login').hidden`)
	if msg := br.text("#login-error"); !strings.Contains(msg, "forbidden") && !strings.Contains(msg, "403") && !strings.Contains(msg, "admin") {
		t.Errorf("agent key refusal says %q", msg)
	}
	br.do("sign in as an admin", chromedp.SendKeys(chromedp.CSS("#api-key"), d.keys[admin]), chromedp.Click(chromedp.CSS("#login-submit")))
	br.waitFor("the quarantined tool to be listed", `document.querySelector('#tools tr[data-tool="fake.limits"][data-quarantined="true"]') !== null`)
	var page struct {
		First      string `json:"first"`
		Row        string `json:"row"`
		Summary    string `json:"summary"`
		Server     string `json:"server"`
		Buttons    int    `json:"buttons"`
		StoredName bool   `json:"stored"`
	}
	br.eval(`(() => {
		const row = document.querySelector('#tools tr[data-tool="fake.limits"]');
		return {first: document.querySelector('#tools tr').dataset.tool, row: row.textContent,
			summary: document.getElementById('summary').dataset.quarantined,
			server: document.querySelector('#servers tr[data-upstream="fake"]').dataset.state,
			buttons: document.querySelectorAll('#tools button.approve').length,
			stored: sessionStorage.getItem('portcullis.admin-key') !== null};
	})()`, &page)
	if page.First != "fake.limits" || !strings.Contains(page.Row, served) || !strings.Contains(page.Row, pinned) ||
		!strings.Contains(page.Row, "quarantined") || page.Summary != "1" || page.Server != "ready" || page.Buttons != 1 || !page.StoredName {
		t.Fatalf("upstreams page: %+v (served %s pinned %s)%s", page, served, pinned, br.consoleDump())
	}
	br.screenshot("explorer-upstreams-quarantined.png")

	br.do("approve the served definition", chromedp.Click(chromedp.CSS(`#tools tr[data-tool="fake.limits"] button.approve`)))
	br.waitFor("the tool to be pinned", `document.getElementById('summary').dataset.approved === 'fake.limits' &&
		document.querySelector('#tools tr[data-tool="fake.limits"][data-quarantined="false"]') !== null`)
	r := g.do(t, http.MethodGet, "/v1/upstreams", d.keys[admin], nil)
	var body struct {
		Upstreams []struct {
			Tools []map[string]any `json:"tools"`
		} `json:"upstreams"`
	}
	if err := json.Unmarshal(r.body, &body); err != nil || len(body.Upstreams) != 1 {
		t.Fatalf("GET /v1/upstreams: %v %s", err, r.body)
	}
	for _, tool := range body.Upstreams[0].Tools {
		if tool["name"] == "fake.limits" && (tool["quarantined"] != false || tool["pinned_sha256"] != served) {
			t.Fatalf("after the page approved it: %v", tool)
		}
	}
	if res := g.call(t, d.keys[agentFull], map[string]any{"tool": "fake.limits", "input": map[string]any{}}); !res.Output.Success {
		t.Fatalf("approved tool: %d %s", res.status, res.body)
	}
	for _, m := range br.messages() {
		if text := m.Text; m.IsException() || strings.Contains(text, "Content Security Policy") || strings.Contains(text, "Trusted") || strings.Contains(text, "Refused") {
			t.Errorf("browser console: %s", m)
		}
	}
}
