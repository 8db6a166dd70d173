package gateway

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/portcullis/portcullis/wire"
)

// TestWriteAnswerMatchesJSON: for random answers whose data a tool encoded
// itself (wire.CompactJSON), appendAnswer writes exactly what json.Marshal
// writes for the whole answer, and writeAnswer exactly what c.JSON writes
// (status, headers, body).
func TestWriteAnswerMatchesJSON(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 5))
	pieces := []string{"a", "/etc/x", "<script>", "&amp;", "é", "😀", "\u2028", `"`, `\`, "\x00", "\xff", "\n", " "}
	str := func() string {
		var b bytes.Buffer
		for range r.IntN(5) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		return b.String()
	}
	for i := range 5000 {
		data, err := json.Marshal(map[string]any{"content": str(), "path": str(), "bytes": r.IntN(1 << 20), "truncated": r.IntN(2) == 0,
			"lines": []any{str(), r.Float64(), nil}})
		if err != nil {
			t.Fatal(err)
		}
		resp := wire.ToolCallResponse{Output: wire.ToolOutput{Success: r.IntN(2) == 0, Data: wire.CompactJSON(data)}}
		if r.IntN(2) == 0 {
			resp.ReceiptID = str()
		}
		if r.IntN(2) == 0 {
			resp.CallID = str()
		}
		if r.IntN(3) > 0 {
			resp.Decision = &wire.DecisionResult{Allow: r.IntN(2) == 0, Reasons: []string{str()}, PolicyRevision: str()}
		}
		if r.IntN(2) == 0 {
			resp.Output.Error = &wire.Error{Code: wire.CodeFSDenied, Message: str(), Details: map[string]any{str(): str()}}
		}
		if r.IntN(3) > 0 {
			resp.Output.Metadata = map[string]any{"receipt_id": str(), str(): r.IntN(9), "duration_ms": 3}
		}
		want, err := json.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendAnswer(nil, resp)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("case %d: appendAnswer = %v\n%s\njson.Marshal:\n%s", i, err, got, want)
		}
	}

	// Through echo: the same status, headers and body as c.JSON, and
	// ?pretty still indents.
	e := echo.New()
	resp := wire.ToolCallResponse{ReceiptID: "r", Decision: &wire.DecisionResult{Allow: true, Reasons: []string{}},
		Output: wire.ToolOutput{Success: true, Data: wire.CompactJSON(`{"content":"\u003cx\u003e"}`), Metadata: map[string]any{"receipt_id": "r"}}}
	for _, target := range []string{"/", "/?pretty"} {
		fast, slow := httptest.NewRecorder(), httptest.NewRecorder()
		if err := writeAnswer(e.NewContext(httptest.NewRequest(http.MethodPost, target, nil), fast), 200, resp); err != nil {
			t.Fatal(err)
		}
		if err := e.NewContext(httptest.NewRequest(http.MethodPost, target, nil), slow).JSON(200, resp); err != nil {
			t.Fatal(err)
		}
		if fast.Code != slow.Code || fast.Header().Get("Content-Type") != slow.Header().Get("Content-Type") || fast.Body.String() != slow.Body.String() {
			t.Errorf("%s: writeAnswer gave %d %q %q, c.JSON %d %q %q", target, fast.Code, fast.Header().Get("Content-Type"), fast.Body,
				slow.Code, slow.Header().Get("Content-Type"), slow.Body)
		}
	}
}
