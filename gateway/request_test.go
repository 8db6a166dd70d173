package gateway

import (
	"encoding/json"
	"testing"

	"github.com/portcullis/portcullis/wire"
)

// TestTypedCallIsTheBody: a call entering typed (MCP tools/call, a nested
// call) is checked exactly as the same call sent as a body: the same
// encoded input (so the receipt's args_sha256 is the same), the same size
// (so the MaxBodyBytes bound falls at the same byte), and the same
// envelope refusals.
func TestTypedCallIsTheBody(t *testing.T) {
	t.Parallel()
	cases := []wire.ToolCallRequest{
		{Tool: "fs.read", Input: json.RawMessage(`{ "path" : "/w/a<b>&c" ,  "n": [1, 2] }`)},
		{Tool: "Exec", Input: json.RawMessage(`{"argv":["/bin/echo","\u2028 é"]}`), SessionID: "s-1", CallID: "c<1>"},
		{Tool: "x", Input: json.RawMessage(`null`)},
		{Tool: "", Input: json.RawMessage(`{}`)},
		{Tool: "bad\x01name", Input: json.RawMessage(`{}`)},
		{Tool: "fs.read", Input: json.RawMessage(`[1]`)},
	}
	for _, req := range cases {
		body, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		for _, limit := range []int64{int64(len(body)) - 1, int64(len(body))} {
			s := &Server{opts: Options{MaxBodyBytes: limit}}
			var viaBody wire.ToolCallRequest
			bodyErr := s.checkSize(int64(len(body)))
			if bodyErr == nil {
				bodyErr = parseToolCall(body, &viaBody)
			}
			in, err := s.typedCall(wire.Principal{ID: "p"}, req, nil, 0)
			if err != nil {
				t.Fatalf("%+v: %v", req, err)
			}
			if (bodyErr == nil) != (in.refused == nil) || bodyErr != nil && (bodyErr.Code != in.refused.Code || bodyErr.Message != in.refused.Message) {
				t.Errorf("%+v limit %d: body refused %v, typed refused %v", req, limit, bodyErr, in.refused)
			}
			if bodyErr == nil && string(in.req.Input) != string(viaBody.Input) {
				t.Errorf("%+v: typed input %s, body input %s: the digests would differ", req, in.req.Input, viaBody.Input)
			}
		}
	}
	if _, err := (&Server{opts: Options{MaxBodyBytes: 1 << 20}}).typedCall(wire.Principal{}, wire.ToolCallRequest{Tool: "x", Input: json.RawMessage(`{"a":`)}, nil, 0); err == nil {
		t.Error("input that is not JSON entered the pipeline")
	}
}
