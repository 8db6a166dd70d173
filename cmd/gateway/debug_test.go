package main

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

// TestDebugListener: with debug.listen set, /debug/pprof/ is served on its
// own listener; unset, nothing listens.
func TestDebugListener(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	d, err := startDebug("", log)
	if err != nil || d != nil {
		t.Fatalf("unset debug.listen started %v, %v; want nothing", d, err)
	}
	d.close() // nil is a no-op

	d, err = startDebug("127.0.0.1:0", log)
	if err != nil {
		t.Fatal(err)
	}
	addr := d.addr
	resp, err := http.Get("http://" + addr + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine") {
		t.Fatalf("GET /debug/pprof/ = %d %.200q", resp.StatusCode, body)
	}
	resp, err = http.Get("http://" + addr + "/debug/pprof/heap?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET heap = %d", resp.StatusCode)
	}
	resp, err = http.Get("http://" + addr + "/v1/tool-calls")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("debug listener answers API paths: %d", resp.StatusCode)
	}
	d.close()
	if resp, err := http.Get("http://" + addr + "/debug/pprof/"); err == nil {
		_ = resp.Body.Close()
		t.Errorf("debug listener still serving after close")
	}
}
