package coderun

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/backends"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

// TestNoCrossRunBridge: the bridge FIFOs and code of a run live in a
// private directory under the gateway's temporary directory. A grant that
// covers that directory (a policy granting /tmp as scratch space) would
// hand another principal's run to the code: it could write tool calls
// into the victim's request FIFO, run as the victim's principal, and read
// its code. Such a grant is refused; the victim's bridge sees nothing.
func TestNoCrossRunBridge(t *testing.T) {
	eachRunner(t, func(t *testing.T, r backends.Runner, deno string) {
		e := newEnv(t)
		marker := filepath.Join(e.work, "victim-dir")
		done := filepath.Join(e.work, "done")
		// The victim: says where it runs, then waits for the attacker.
		victimDisp := &fakeDispatcher{}
		victim := New(Options{Runner: r, Deno: deno})
		vcode := "Deno.writeTextFileSync(`" + marker + ".tmp`, import.meta.url); Deno.renameSync(`" + marker + ".tmp`, `" + marker + "`);\n" +
			"for (let i = 0; i < 300; i++) { try { Deno.statSync(`" + done + "`); break; } catch { await new Promise((r) => setTimeout(r, 100)); } }"
		vres := make(chan tools.Result, 1)
		go func() {
			res, _ := exec(t, victim, e.decision(), victimDisp, map[string]any{"code": vcode, "timeout_s": 60})
			vres <- res
		}()
		deadline := time.Now().Add(30 * time.Second)
		var vdir string
		for time.Now().Before(deadline) {
			if b, err := os.ReadFile(marker); err == nil {
				vdir = strings.TrimSuffix(strings.TrimPrefix(string(b), "file://"), "/code.ts")
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if vdir == "" {
			t.Fatal("the victim run did not start")
		}
		tmp, err := filepath.EvalSymlinks(os.TempDir())
		must(t, err)
		// The attacker: granted the gateway's temporary directory.
		acode := "const f = await Deno.open(`" + filepath.Join(vdir, "bridge.req") + "`, {write: true});\n" +
			"await f.write(new TextEncoder().encode(JSON.stringify({id: 7, tool: \"fs.read\", input: {path: \"HIJACKED\"}}) + \"\\n\"));\n" +
			"console.log(Deno.readTextFileSync(`" + filepath.Join(vdir, "code.ts") + "`).slice(0, 40));\n" +
			"await new Promise((r) => setTimeout(r, 1000));"
		d := e.decision()
		d.FSGrants = append(d.FSGrants, wire.FSGrant{Path: tmp, Mode: wire.ModeReadWrite})
		attacker := New(Options{Runner: r, Deno: deno})
		b, _ := json.Marshal(map[string]any{"code": acode, "timeout_s": 30})
		c, err := attacker.Prepare(context.Background(), b)
		must(t, err)
		scope, err := c.Enforce(context.Background(), d)
		var ares tools.Result
		if err == nil {
			ares = c.Run(tools.WithDispatcher(context.Background(), &fakeDispatcher{}), scope)
		}
		must(t, os.WriteFile(done, nil, 0o644))
		<-vres
		victimDisp.mu.Lock()
		defer victimDisp.mu.Unlock()
		if len(victimDisp.calls) > 0 {
			t.Errorf("the attacker's run made tool calls through the victim's bridge: %v", victimDisp.calls)
		}
		if data, ok := ares.Output.Data.(Data); ok && strings.Contains(data.Output, "writeTextFileSync") {
			t.Errorf("the attacker read the victim's code: %q", data.Output)
		}
		if err == nil && ares.Output.Error == nil {
			t.Errorf("a grant of the gateway's temporary directory %s ran (status %s)", tmp, ares.Status)
		}
	})
}
