package coderun

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestBridgeKeepsTheLastLine: the code's last line (its result) may still
// be in the request FIFO when the run ends and the bridge is closed; it is
// read, not dropped.
func TestBridgeKeepsTheLastLine(t *testing.T) {
	t.Parallel()
	for i := range 200 {
		dir := t.TempDir()
		b, err := openBridge(filepath.Join(dir, "req"), filepath.Join(dir, "resp"), nil, 4, 1<<10)
		if err != nil {
			t.Fatal(err)
		}
		b.serve(context.Background())
		w, err := os.OpenFile(filepath.Join(dir, "req"), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteString(`{"op":"result","value":` + strconv.Itoa(i) + "}\n"); err != nil {
			t.Fatal(err)
		}
		_ = w.Close() // the code has ended
		b.close()
		if _, result, _, _ := b.snapshot(); string(result) != strconv.Itoa(i) {
			t.Fatalf("round %d: result %q, want %d: the last line was dropped", i, result, i)
		}
	}
}
