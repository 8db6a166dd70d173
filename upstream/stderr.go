package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"time"

	"golang.org/x/time/rate"
)

// An upstream's stderr reaches the gateway's log at most
// stderrLinesPerSecond lines a second (bursts of stderrBurst), each cut at
// maxStderrLine bytes; the lines past that are dropped and counted, and
// the count is logged ("upstream stderr: lines suppressed") at most every
// stderrSummaryEvery while lines are dropped, and once the flood ends.
const (
	stderrLinesPerSecond = 50
	stderrBurst          = 200
	maxStderrLine        = 2000
	stderrSummaryEvery   = 10 * time.Second
)

// logLines reads r line by line until it ends, passing each line that the
// limiter allows to logLine (a line longer than the reader's buffer is cut
// there, its rest discarded) and the number dropped to summary.
func logLines(r io.Reader, lim *rate.Limiter, now func() time.Time, logLine func(string), summary func(int)) {
	br := bufio.NewReaderSize(r, 4096)
	suppressed := 0
	var since time.Time // the first line dropped since the last summary
	flush := func() {
		if suppressed > 0 {
			summary(suppressed)
			suppressed = 0
		}
	}
	for {
		line, err := br.ReadSlice('\n')
		long := errors.Is(err, bufio.ErrBufferFull)
		if len(line) > 0 {
			t := now()
			if lim.AllowN(t, 1) {
				flush()
				logLine(string(bytes.TrimRight(line, "\r\n")))
			} else {
				if suppressed == 0 {
					since = t
				}
				suppressed++
				if t.Sub(since) >= stderrSummaryEvery {
					flush()
				}
			}
		}
		for long { // the rest of an over-long line
			_, err = br.ReadSlice('\n')
			long = errors.Is(err, bufio.ErrBufferFull)
		}
		if err != nil {
			flush()
			_, _ = io.Copy(io.Discard, r)
			return
		}
	}
}
