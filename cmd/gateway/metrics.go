package main

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portcullis/portcullis/evidence"
)

// evidenceMetrics are the evidence writer's and checkpointer's series.
// They exist before the registry (the writer is opened first) and are
// registered with it in newServer.
type evidenceMetrics struct {
	batch   prometheus.Histogram
	commit  *prometheus.HistogramVec
	writer  *evidence.Writer
	checker *evidence.Checkpointer // nil: checkpoints off
}

func newEvidenceMetrics() *evidenceMetrics {
	return &evidenceMetrics{
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "portcullis_evidence_batch_events",
			Help:    "Events per evidence commit (group commit: what queued while the previous commit ran).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}),
		commit: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "portcullis_evidence_commit_duration_seconds",
			Help:    "Time of one evidence commit (one transaction), by result: ok or error.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"result"}),
	}
}

// observe is the writer's WriterOptions.Observe.
func (m *evidenceMetrics) observe(events int, took time.Duration, err error) {
	m.batch.Observe(float64(events))
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.commit.WithLabelValues(result).Observe(took.Seconds())
}

// register adds the series to reg: the histograms, the writer's queue
// depth and, with checkpoints on, the checkpoint lag.
func (m *evidenceMetrics) register(reg prometheus.Registerer) error {
	cs := []prometheus.Collector{m.batch, m.commit}
	if m.writer != nil {
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "portcullis_evidence_queue_events",
			Help: "Evidence events waiting for a commit.",
		}, func() float64 { return float64(m.writer.QueueDepth()) }))
	}
	if m.checker != nil {
		cs = append(cs, checkpointLag{m.checker, prometheus.NewDesc("portcullis_evidence_checkpoint_lag_seconds",
			"Seconds since this instance last completed a checkpoint pass; absent while another replica leads or before the first pass.", nil, nil)})
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// checkpointLag reports the age of the checkpointer's last pass, only
// once there is one.
type checkpointLag struct {
	c    *evidence.Checkpointer
	desc *prometheus.Desc
}

func (l checkpointLag) Describe(ch chan<- *prometheus.Desc) { ch <- l.desc }

func (l checkpointLag) Collect(ch chan<- prometheus.Metric) {
	if t := l.c.LastPass(); !t.IsZero() {
		ch <- prometheus.MustNewConstMetric(l.desc, prometheus.GaugeValue, time.Since(t).Seconds())
	}
}
