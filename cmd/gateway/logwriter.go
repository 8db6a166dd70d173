package main

import (
	"io"
	"sync"
)

// logWriter coalesces the log's lines into fewer writes without delaying
// any: Write appends the line to a buffer and wakes one flusher goroutine,
// which writes out everything that accumulated meanwhile in one write. An
// idle gateway writes each line as soon as the flusher runs (no timer, no
// batching delay); under load, the lines of many requests share one write
// (one JSON line per request at info was a write(2) per request, a few
// percent of the gateway's CPU per decision: docs/performance.md). A line
// is in the buffer for at most one write's time. Close writes what is left
// and stops the flusher; Writes after Close go straight to the destination.
type logWriter struct {
	dst     io.Writer
	writeMu sync.Mutex // held across each write to dst, taken before mu

	mu      sync.Mutex
	buf     []byte // lines not yet written
	closed  bool
	wake    chan struct{}
	stopped chan struct{}
}

// maxLogBuffer bounds the buffer: a Write that finds this much unwritten
// (a destination slower than the log) writes it out itself, so memory stays
// bounded and a slow log slows the requests that log, as before.
const maxLogBuffer = 1 << 20

func newLogWriter(dst io.Writer) *logWriter {
	w := &logWriter{dst: dst, wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	go w.flusher()
	return w
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.closed || len(w.buf)+len(p) > maxLogBuffer {
		// Closed, or back-pressure: write the backlog and this line here,
		// in order (writeMu, then mu, as the flusher takes them).
		w.mu.Unlock()
		return w.writeThrough(p)
	}
	w.buf = append(w.buf, p...)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default: // already woken: the flusher will take this line too
	}
	return len(p), nil
}

func (w *logWriter) writeThrough(p []byte) (int, error) {
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	w.mu.Lock()
	out := append(w.buf, p...)
	w.buf = nil // out is this goroutine's now
	w.mu.Unlock()
	if _, err := w.dst.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// flusher writes the buffer out each time it is woken, swapping buffers so
// that Writes are not held up by the write itself.
func (w *logWriter) flusher() {
	defer close(w.stopped)
	var out []byte
	for range w.wake {
		w.writeMu.Lock()
		w.mu.Lock()
		out, w.buf = w.buf, out[:0]
		closed := w.closed
		w.mu.Unlock()
		if len(out) > 0 {
			_, _ = w.dst.Write(out) // nowhere to report a failing log
		}
		w.writeMu.Unlock()
		if closed {
			return
		}
	}
}

// Close writes out what is buffered and stops the flusher; later Writes go
// to the destination directly.
func (w *logWriter) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.mu.Unlock()
	select { // the flusher takes what is left, sees closed, returns
	case w.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
	<-w.stopped
	return nil
}
