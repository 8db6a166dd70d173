package gateway

import (
	"bytes"
	"errors"
	"testing"

	"github.com/portcullis/portcullis/wire"
)

// FuzzParseToolCall: no body crashes the decoder; every refusal is a
// contract error naming a field; every acceptance has a tool and an object
// input.
func FuzzParseToolCall(f *testing.F) {
	for _, seed := range []string{
		`{"tool":"Exec","input":{"argv":["/bin/echo","hi"]},"call_id":"c","session_id":"s"}`,
		`{"tool":"Exec","input":[]}`, `{"tool":"","input":{}}`, `{"tool":"x","input":{},"extra":1}`,
		`{"tool":"x\u0000","input":{}}`, "{\"tool\":\"\xff\",\"input\":{}}", `{"tool":"x","input":{}} {}`,
		`null`, ``, `{"tool":1}`, `{"input":{}}`, `{"tool":"x","input":null}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req wire.ToolCallRequest
		we := parseToolCall(body, &req)
		if we != nil {
			if we.Code != wire.CodeInvalidInput {
				t.Fatalf("code %s, want invalid_input", we.Code)
			}
			if we.Details["field"] == nil || we.Details["field"] == "" {
				t.Fatalf("error %q names no field", we.Message)
			}
			var target *wire.Error
			if !errors.As(error(we), &target) {
				t.Fatal("not a *wire.Error")
			}
			return
		}
		if req.Tool == "" || !printable(req.Tool) {
			t.Fatalf("accepted tool %q", req.Tool)
		}
		if in := bytes.TrimSpace(req.Input); len(in) == 0 || in[0] != '{' {
			t.Fatalf("accepted non-object input %q", req.Input)
		}
	})
}
