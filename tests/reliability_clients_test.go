package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Limits the hostile-clients suite configures (short, so the suite can show
// each one cutting a connection within seconds).
const (
	hostileHeaderTimeout = 2 * time.Second
	hostileReadTimeout   = 5 * time.Second
	hostileIdleTimeout   = 3 * time.Second
	hostileHeaderBytes   = 16384
	hostileBodyBytes     = 65536
	// runtime.memory_limit, in MiB.
	hostileMemoryLimitMiB = 160
)

// withHTTPLimits appends the server limits to the deployment's config.
func withHTTPLimits(t *testing.T, d *deployment) {
	t.Helper()
	f, err := os.OpenFile(d.configPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "max_body_bytes: %d\nhttp:\n  read_header_timeout: %s\n  read_timeout: %s\n  idle_timeout: %s\n  max_header_bytes: %d\n",
		hostileBodyBytes, hostileHeaderTimeout, hostileReadTimeout, hostileIdleTimeout, hostileHeaderBytes)
	// A memory limit as operations.md#sizing advises for production: at
	// the default runtime.gc_percent (400) the heap may otherwise reach
	// five times the live heap, garbage the attack churns through.
	fmt.Fprintf(f, "runtime:\n  memory_limit: %dMiB\n", hostileMemoryLimitMiB)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// rssBytes is the gateway's resident set size (VmRSS).
func (g *gateway) rssBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", g.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("read the gateway's /proc status: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			f := strings.Fields(v)
			n, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil || len(f) != 2 || f[1] != "kB" {
				t.Fatalf("VmRSS line %q", l)
			}
			return n << 10
		}
	}
	t.Fatal("no VmRSS in /proc status")
	return 0
}

// rawConns tracks the attack's raw connections so the end of the attack
// can close every one.
type rawConns struct {
	mu    sync.Mutex
	conns map[net.Conn]bool
}

func (r *rawConns) dial(addr string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.conns[c] = true
	r.mu.Unlock()
	return c, nil
}

func (r *rawConns) close(c net.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
	_ = c.Close()
}

func (r *rawConns) closeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.conns {
		_ = c.Close()
	}
	clear(r.conns)
}

// lifetimes records how long the server kept attack connections open
// before it cut them.
type lifetimes struct {
	mu  sync.Mutex
	max time.Duration
	sum time.Duration
	n   int
}

func (l *lifetimes) add(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.max = max(l.max, d)
	l.sum += d
	l.n++
}

func (l *lifetimes) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == 0 {
		return "none cut"
	}
	return fmt.Sprintf("%d cut, mean %s, max %s", l.n, (l.sum / time.Duration(l.n)).Round(time.Millisecond), l.max.Round(time.Millisecond))
}

// readResponse reads one HTTP answer from c within d.
func readResponse(c net.Conn, d time.Duration) (*http.Response, []byte, error) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp, b, err
}

// waitClosed reads from c until the server closes it (or within passes)
// and returns how long that took and whether it closed.
func waitClosed(c net.Conn, within time.Duration) (time.Duration, bool) {
	t0 := time.Now()
	_ = c.SetReadDeadline(t0.Add(within))
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return time.Since(t0), false
			}
			return time.Since(t0), true
		}
	}
}

// TestReliabilityHostileClients configures short server limits and shows
// each one working (431 for huge headers, 413 in the contract's shape for a
// body over the limit and for a chunked body that never ends, slowloris and
// trickled bodies cut at their timeouts, idle keep-alives closed), then
// attacks the gateway with hundreds of slowloris and idle connections and
// header and body floods at once while a normal client keeps calling: its
// calls all succeed with reasonable latency, and the gateway's RSS and
// goroutines stay bounded and fall back once the attack stops.
func TestReliabilityHostileClients(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, storeSQLite)
	withHTTPLimits(t, d)
	g := d.start(t)
	addr := strings.TrimPrefix(g.baseURL, "http://")
	key := d.keys[agentFull]
	call, _ := json.Marshal(execCall(map[string]any{"argv": []string{"/usr/bin/true"}}, "", ""))
	normal := newLoadClient(2)
	normalCall := func() (time.Duration, error) {
		t0 := time.Now()
		status, b, err := postJSON(context.Background(), normal, g.baseURL+"/v1/tool-calls", key, call)
		if err == nil && status != http.StatusOK {
			err = fmt.Errorf("HTTP %d %.300s", status, b)
		}
		return time.Since(t0), err
	}
	var base []time.Duration
	for range 20 {
		lat, err := normalCall()
		if err != nil {
			t.Fatalf("normal call before the attack: %v", err)
		}
		base = append(base, lat)
	}
	baseRSS, baseG := g.rssBytes(t), g.metric(t, "go_goroutines")
	t.Logf("before: RSS %.1f MiB, %v goroutines, normal call median %s", float64(baseRSS)/(1<<20), baseG, medianDur(base).Round(time.Microsecond))
	conns := &rawConns{conns: map[net.Conn]bool{}}
	defer conns.closeAll()

	// 1. Each limit on its own.
	t.Run("huge headers 431", func(t *testing.T) {
		c, err := conns.dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conns.close(c)
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n", strings.Repeat("a", 2*hostileHeaderBytes))
		resp, _, err := readResponse(c, 10*time.Second)
		if err != nil {
			t.Fatalf("no answer to a %d-byte header: %v", 2*hostileHeaderBytes, err)
		}
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("huge header: HTTP %d, want 431", resp.StatusCode)
		}
	})
	t.Run("body over the limit 413", func(t *testing.T) {
		big, _ := json.Marshal(execCall(map[string]any{"argv": []string{"/usr/bin/echo", strings.Repeat("x", 2*hostileBodyBytes)}}, "too-big", ""))
		r := g.do(t, http.MethodPost, "/v1/tool-calls", key, big)
		res := decodeToolCall(t, r)
		wantStatus(t, res, http.StatusRequestEntityTooLarge, "too_large")
		if res.Output.Error != nil && res.Output.Error.Details["limit"] != float64(hostileBodyBytes) {
			t.Errorf("too_large details = %v, want limit %d", res.Output.Error.Details, hostileBodyBytes)
		}
		if res.ReceiptID == "" {
			t.Fatalf("413 without a receipt_id: %s", r)
		}
		rc, ok := g.getReceipt(t, res.ReceiptID)
		if !ok || rc.Decision != "invalid" || rc.Outcome == nil || rc.Outcome.ErrorCode == nil || *rc.Outcome.ErrorCode != "too_large" {
			t.Errorf("receipt of the 413: %s", rc.raw)
		}
	})
	t.Run("endless chunked body 413", func(t *testing.T) {
		c, err := conns.dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conns.close(c)
		fmt.Fprintf(c, "POST /v1/tool-calls HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n", key)
		var sentBytes atomic.Int64
		writerDone := make(chan error, 1)
		go func() {
			chunk := []byte(fmt.Sprintf("%x\r\n%s\r\n", 8192, strings.Repeat("[", 8192)))
			for {
				_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
				if _, err := c.Write(chunk); err != nil {
					writerDone <- err
					return
				}
				sentBytes.Add(8192)
			}
		}()
		resp, body, err := readResponse(c, 20*time.Second)
		if err != nil {
			t.Fatalf("no answer to an endless chunked body: %v", err)
		}
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), `"code":"too_large"`) || !strings.Contains(string(body), `"output"`) {
			t.Errorf("endless chunked body: HTTP %d %s, want 413 too_large in the ToolCallResponse shape", resp.StatusCode, body)
		}
		select {
		case <-writerDone:
		case <-time.After(20 * time.Second):
			t.Error("the gateway kept reading an endless body 20s after answering 413")
		}
		t.Logf("endless chunked body: 413 after %d KiB sent; connection closed", sentBytes.Load()>>10)
	})
	t.Run("slowloris cut", func(t *testing.T) {
		c, err := conns.dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conns.close(c)
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n")
		t0 := time.Now()
		done := make(chan struct{})
		go func() { // one header byte every 200 ms
			defer close(done)
			for range 200 {
				if _, err := c.Write([]byte("X")); err != nil {
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
		}()
		if _, closed := waitClosed(c, 30*time.Second); !closed {
			t.Fatalf("a slowloris connection was still open after 30s (read_header_timeout %s)", hostileHeaderTimeout)
		}
		took := time.Since(t0)
		if took < hostileHeaderTimeout-100*time.Millisecond || took > hostileHeaderTimeout+8*time.Second {
			t.Errorf("slowloris connection cut after %s, want about read_header_timeout %s", took, hostileHeaderTimeout)
		}
		t.Logf("slowloris connection cut after %s", took.Round(time.Millisecond))
	})
	t.Run("trickled body cut", func(t *testing.T) {
		c, err := conns.dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conns.close(c)
		fmt.Fprintf(c, "POST /v1/tool-calls HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n", key)
		t0 := time.Now()
		go func() { // a one-byte chunk every 200 ms, forever
			for range 300 {
				if _, err := c.Write([]byte("1\r\n \r\n")); err != nil {
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
		}()
		if _, closed := waitClosed(c, 40*time.Second); !closed {
			t.Fatalf("a trickled body was still being read after 40s (read_timeout %s)", hostileReadTimeout)
		}
		took := time.Since(t0)
		if took > hostileReadTimeout+8*time.Second {
			t.Errorf("trickled body cut after %s, want about read_timeout %s", took, hostileReadTimeout)
		}
		t.Logf("trickled body: connection ended after %s", took.Round(time.Millisecond))
	})
	t.Run("idle keep-alive closed", func(t *testing.T) {
		c, err := conns.dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conns.close(c)
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		br := bufio.NewReader(c)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		t0 := time.Now()
		_ = c.SetReadDeadline(t0.Add(30 * time.Second))
		if _, err := br.ReadByte(); err == nil {
			t.Fatal("unexpected bytes on an idle connection")
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("idle keep-alive connection still open after 30s (idle_timeout %s)", hostileIdleTimeout)
		}
		took := time.Since(t0)
		if took < hostileIdleTimeout-100*time.Millisecond || took > hostileIdleTimeout+8*time.Second {
			t.Errorf("idle connection closed after %s, want about idle_timeout %s", took, hostileIdleTimeout)
		}
		t.Logf("idle keep-alive connection closed after %s", took.Round(time.Millisecond))
	})
	if t.Failed() {
		return
	}

	// 2. All at once, while a normal client keeps calling.
	slowloris, idlers := pick(200, 1000), pick(200, 1000)
	floods := pick(4, 16)
	attackFor := pick(8*time.Second, 60*time.Second)
	ctx, stop := context.WithTimeout(context.Background(), attackFor)
	defer stop()
	var (
		wg                                sync.WaitGroup
		slowLife, idleLife                lifetimes
		n431, n413, floodOther, dialFails atomic.Int64
	)
	attacker := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				f()
			}
		}()
	}
	dialOrWait := func() net.Conn {
		c, err := conns.dial(addr)
		if err != nil {
			dialFails.Add(1)
			time.Sleep(100 * time.Millisecond)
			return nil
		}
		return c
	}
	for range slowloris {
		attacker(func() {
			c := dialOrWait()
			if c == nil {
				return
			}
			defer conns.close(c)
			t0 := time.Now()
			if _, err := fmt.Fprintf(c, "POST /v1/tool-calls HTTP/1.1\r\nHost: x\r\n"); err != nil {
				return
			}
			for ctx.Err() == nil {
				time.Sleep(500 * time.Millisecond)
				if _, err := c.Write([]byte("X")); err != nil {
					if ctx.Err() == nil {
						slowLife.add(time.Since(t0))
					}
					return
				}
			}
		})
	}
	for range idlers {
		attacker(func() {
			c := dialOrWait()
			if c == nil {
				return
			}
			defer conns.close(c)
			fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
			br := bufio.NewReader(c)
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			t0 := time.Now()
			_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
			if _, err := br.ReadByte(); err != nil && ctx.Err() == nil {
				idleLife.add(time.Since(t0))
			}
		})
	}
	bigHeader := strings.Repeat("h", 2*hostileHeaderBytes)
	bigBody := strings.Repeat("b", 4*hostileBodyBytes)
	for i := range floods {
		attacker(func() {
			c := dialOrWait()
			if c == nil {
				return
			}
			defer conns.close(c)
			if i%2 == 0 {
				fmt.Fprintf(c, "GET /v1/tools HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n", bigHeader)
			} else {
				fmt.Fprintf(c, "POST /v1/tool-calls HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", key, len(bigBody), bigBody)
			}
			resp, _, err := readResponse(c, 10*time.Second)
			// Paced: a refused connection lingers half a second on the
			// server (net/http's RST avoidance), so an unpaced flooder
			// would measure its own pace rather than the gateway's bounds.
			defer time.Sleep(20 * time.Millisecond)
			switch {
			case err != nil:
				floodOther.Add(1)
			case resp.StatusCode == http.StatusRequestHeaderFieldsTooLarge:
				n431.Add(1)
			case resp.StatusCode == http.StatusRequestEntityTooLarge:
				n413.Add(1)
			default:
				floodOther.Add(1)
			}
		})
	}

	// The normal client and the sampler.
	var lats []time.Duration
	var callErrs []string
	var peakRSS int64
	var peakG float64
	t0 := time.Now()
	nextSample := time.Now()
	for ctx.Err() == nil {
		lat, err := normalCall()
		if err != nil {
			callErrs = append(callErrs, err.Error())
		} else {
			lats = append(lats, lat)
		}
		if time.Now().After(nextSample) {
			peakRSS = max(peakRSS, g.rssBytes(t))
			peakG = max(peakG, g.metric(t, "go_goroutines"))
			nextSample = time.Now().Add(250 * time.Millisecond)
		}
	}
	attackTook := time.Since(t0)
	stop()
	conns.closeAll()
	wg.Wait()
	conns.closeAll()
	settle, settled := pollUntil(30*time.Second, func() bool { return g.metric(t, "go_goroutines") <= baseG+30 })
	endRSS, endG := g.rssBytes(t), g.metric(t, "go_goroutines")

	p50, p99, worst := medianDur(lats), percentileDur(lats, 99), percentileDur(lats, 100)
	t.Logf("attack %s: %d slowloris + %d idle connections (re-opened as cut), %d flooders (431: %d, 413: %d, other: %d), %d failed dials",
		attackTook.Round(time.Millisecond), slowloris, idlers, floods, n431.Load(), n413.Load(), floodOther.Load(), dialFails.Load())
	t.Logf("slowloris connections: %s; idle connections: %s", &slowLife, &idleLife)
	t.Logf("normal client: %d calls, %d failed, p50 %s p99 %s max %s (before: median %s)",
		len(lats)+len(callErrs), len(callErrs), p50.Round(time.Microsecond), p99.Round(time.Microsecond), worst.Round(time.Microsecond), medianDur(base).Round(time.Microsecond))
	t.Logf("gateway: RSS %.1f MiB before, peak %.1f MiB, %.1f MiB after; goroutines %v before, peak %v, %v after (back within %s)",
		float64(baseRSS)/(1<<20), float64(peakRSS)/(1<<20), float64(endRSS)/(1<<20), baseG, peakG, endG, settle.Round(time.Millisecond))

	for i, e := range callErrs {
		if i == 5 {
			break
		}
		t.Errorf("normal call failed during the attack: %s", e)
	}
	if len(lats) < 10 {
		t.Errorf("the normal client made only %d calls in %s", len(lats), attackTook)
	}
	if p50 > 2*time.Second || worst > 20*time.Second {
		t.Errorf("normal calls during the attack: p50 %s, max %s; want p50 under 2s and no call over 20s", p50, worst)
	}
	// Bounded: each open connection costs the server a goroutine (two
	// while a request is read) and a few KiB; nothing grows with the
	// attack's duration or the bytes the attackers send.
	maxConns := float64(slowloris + idlers + floods)
	if peakG > baseG+3*maxConns+100 {
		t.Errorf("goroutines peaked at %v with at most %v attack connections (baseline %v)", peakG, maxConns, baseG)
	}
	if peakRSS > baseRSS+256<<20 {
		t.Errorf("RSS grew from %d MiB to %d MiB under the attack", baseRSS>>20, peakRSS>>20)
	}
	if !settled {
		t.Errorf("goroutines did not fall back after the attack: %v (baseline %v)", endG, baseG)
	}
	if n431.Load() == 0 || n413.Load() == 0 {
		t.Errorf("floods answered 431 %d times and 413 %d times; want both", n431.Load(), n413.Load())
	}
	if slowLife.n == 0 {
		t.Error("no slowloris connection was cut during the attack")
	} else if slowLife.max > hostileHeaderTimeout+10*time.Second {
		t.Errorf("a slowloris connection lived %s (read_header_timeout %s)", slowLife.max, hostileHeaderTimeout)
	}
	if idleLife.n == 0 {
		t.Error("no idle connection was closed during the attack")
	} else if idleLife.max > hostileIdleTimeout+10*time.Second {
		t.Errorf("an idle connection lived %s (idle_timeout %s)", idleLife.max, hostileIdleTimeout)
	}
	if r := g.do(t, http.MethodGet, "/readyz", "", nil); r.status != http.StatusOK {
		t.Errorf("/readyz after the attack: %s", r)
	}
}

func medianDur(ds []time.Duration) time.Duration { return percentileDur(ds, 50) }

// percentileDur is the p-th percentile (100: the maximum).
func percentileDur(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	i := len(s) * p / 100
	if i >= len(s) {
		i = len(s) - 1
	}
	return s[i]
}
