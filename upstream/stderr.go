package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// An upstream's stderr reaches the gateway's log at most
// stderrLinesPerSecond lines a second (bursts of stderrBurst), each cut at
// maxStderrLine bytes; the lines past that are dropped and counted, and
// the count is logged ("upstream stderr: lines suppressed") at most every
// stderrSummaryEvery while lines are dropped, and within that time once
// the flood stops.
const (
	stderrLinesPerSecond = 50
	stderrBurst          = 200
	maxStderrLine        = 2000
	stderrSummaryEvery   = 10 * time.Second
)

// suppressedLines counts dropped lines and reports them to summary: at
// the latest every period of the clock while lines are dropped, within a
// period of real time after the first one, when a line is logged again,
// and at the end.
type suppressedLines struct {
	summary func(int)
	every   time.Duration

	mu    sync.Mutex
	n     int
	since time.Time // by the clock: the first line dropped since the last summary
	timer *time.Timer
}

func (s *suppressedLines) drop(t time.Time) {
	s.mu.Lock()
	if s.n == 0 {
		s.since = t
	}
	s.n++
	due := t.Sub(s.since) >= s.every
	if s.timer == nil && !due {
		s.timer = time.AfterFunc(s.every, s.flush)
	}
	s.mu.Unlock()
	if due {
		s.flush()
	}
}

func (s *suppressedLines) flush() {
	s.mu.Lock()
	n := s.n
	s.n = 0
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	if n > 0 {
		// Under the lock: summaries are never reordered or overlapped.
		s.summary(n)
	}
	s.mu.Unlock()
}

// logLines reads r line by line until it ends, passing each line that the
// limiter allows to logLine (a line longer than the reader's buffer is cut
// there, its rest discarded) and the number dropped to summary (every:
// stderrSummaryEvery, but for tests).
func logLines(r io.Reader, lim *rate.Limiter, now func() time.Time, every time.Duration, logLine func(string), summary func(int)) {
	br := bufio.NewReaderSize(r, 4096)
	sup := &suppressedLines{summary: summary, every: every}
	for {
		line, err := br.ReadSlice('\n')
		long := errors.Is(err, bufio.ErrBufferFull)
		if len(line) > 0 {
			t := now()
			if lim.AllowN(t, 1) {
				sup.flush()
				logLine(string(bytes.TrimRight(line, "\r\n")))
			} else {
				sup.drop(t)
			}
		}
		for long { // the rest of an over-long line
			_, err = br.ReadSlice('\n')
			long = errors.Is(err, bufio.ErrBufferFull)
		}
		if err != nil {
			sup.flush()
			_, _ = io.Copy(io.Discard, r)
			return
		}
	}
}
