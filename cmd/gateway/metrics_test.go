package main

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestServeMetrics: portcullis_build_info names the Go version, the
// evidence commit series observe, and all of it lints clean.
func TestServeMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	reg.MustRegister(buildInfoGauge())
	m := newEvidenceMetrics()
	if err := m.register(reg); err != nil {
		t.Fatal(err)
	}
	m.observe(3, 2*time.Millisecond, nil)
	m.observe(1, time.Second, errors.New("down"))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, mf := range mfs {
		switch mf.GetName() {
		case "portcullis_build_info":
			for _, l := range mf.GetMetric()[0].GetLabel() {
				found = found || (l.GetName() == "goversion" && l.GetValue() == runtime.Version())
			}
		case "portcullis_evidence_batch_events":
			h := mf.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() != 2 || h.GetSampleSum() != 4 {
				t.Errorf("batch histogram: %d batches of %v events, want 2 and 4", h.GetSampleCount(), h.GetSampleSum())
			}
		}
	}
	if n := testutil.CollectAndCount(m.commit); n != 2 {
		t.Errorf("commit series %d, want ok and error", n)
	}
	if !found {
		t.Error("portcullis_build_info lacks goversion")
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}
