package coderun

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/backends"
	"github.com/portcullis/portcullis/wire"
)

// listingDispatcher is a fakeDispatcher that also lists the caller's tools.
type listingDispatcher struct {
	fakeDispatcher
	tools []string
}

func (l *listingDispatcher) ListTools(context.Context) ([]wire.FunctionSpec, error) {
	var out []wire.FunctionSpec
	for _, n := range l.tools {
		out = append(out, wire.FunctionSpec{Name: n, Parameters: json.RawMessage(`{"type":"object"}`)})
	}
	return out, nil
}

// TestTypedStubs: the code gets tools.<ns>.<name> for exactly the tools the
// dispatcher lists for the caller, each the same governed call as
// tools.call, and nothing for the others; the tools object is frozen.
func TestTypedStubs(t *testing.T) {
	eachRunner(t, func(t *testing.T, r backends.Runner, deno string) {
		e := newEnv(t)
		disp := &listingDispatcher{tools: []string{"fs.read", "Exec", "http.get"}}
		res, data := exec(t, New(Options{Runner: r, Deno: deno}), e.decision(), disp, map[string]any{"code": `
const a = await tools.fs.read({path: "/x"});
const b = await tools.Exec({argv: ["/bin/true"]});
export const result = {
  a: a.success && a.data.echo.path, b: b.success, ids: [a.receipt_id, b.receipt_id],
  has: Object.keys(tools).sort(), write: typeof tools.fs.write, frozen: Object.isFrozen(tools) && Object.isFrozen(tools.fs),
};`})
		if !res.Output.Success {
			t.Fatalf("%+v\n%s", res.Output.Error, data.Stderr)
		}
		var got struct {
			A      string
			B      bool
			IDs    []string
			Has    []string
			Write  string
			Frozen bool
		}
		if err := json.Unmarshal(data.Result, &got); err != nil {
			t.Fatalf("%v: %s", err, data.Result)
		}
		if got.A != "/x" || !got.B || strings.Join(got.Has, ",") != "Exec,call,fs,http" || got.Write != "undefined" || !got.Frozen {
			t.Errorf("result %s", data.Result)
		}
		if len(disp.calls) != 2 || !strings.HasPrefix(disp.calls[0], "fs.read ") || !strings.HasPrefix(disp.calls[1], "Exec ") || data.ToolCalls.Count != 2 {
			t.Errorf("dispatched %v, tool_calls %+v", disp.calls, data.ToolCalls)
		}
	})
}
