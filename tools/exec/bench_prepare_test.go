package exectool

import (
	"context"
	"encoding/json"
	"testing"
)

// BenchmarkPrepare is Exec's input validation and normalization, the part
// of the request path the input schema runs in.
func BenchmarkPrepare(b *testing.B) {
	tool := newTool()
	in := json.RawMessage(`{"argv":["/usr/bin/git","-C","/srv/work/repo","log","--oneline","-n","20"],"cwd":"/tmp","env":{"GIT_PAGER":"cat"},"timeout_s":30,"max_output_bytes":65536}`)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tool.Prepare(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
}
