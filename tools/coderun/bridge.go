package coderun

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"sync"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

// maxBridgeLine bounds one request line from the code: a tool call, or the
// result line, whose value may be as large as MaxMaxOutputBytes, with room
// for the envelope around it. A longer line stops the bridge and fails the
// run as a result too large (the only line that can legitimately be this
// long), so that a result never vanishes from a success.
const maxBridgeLine = MaxMaxOutputBytes + 64<<10

// bridge serves the per-run channel: two FIFOs in the run directory, one
// for requests (the code writes JSON lines), one for answers. FIFOs rather
// than a unix socket because the sandbox's seccomp filter refuses AF_UNIX
// sockets (they pass through mounts and network namespaces), and a FIFO
// reaches nothing but this gateway. Each request line is a tool call that
// goes through the gateway's pipeline via the Dispatcher, bounded by the
// per-run call cap; one "result" line carries the module's result.
type bridge struct {
	req, resp *os.File         // opened O_RDWR: never block, never see EOF
	disp      tools.Dispatcher // nil: every call is refused
	maxCalls  int
	maxResult int

	// stop ends the run; called once, when the code asks for one tool
	// call more than maxCalls.
	stop func()

	wg    sync.WaitGroup
	mu    sync.Mutex
	calls ToolCalls
	// overBudget is set when a call past maxCalls was asked for: the run
	// is stopped and fails.
	overBudget bool
	// result is the JSON the code reported (nil: none).
	result          json.RawMessage
	resultTruncated bool

	// endOp marks the end of the requests: close writes it behind what the
	// code wrote, so the handler reads everything before it stops.
	endOp string
}

// closeGrace bounds how long close waits for the handler to read what the
// request FIFO still holds.
const closeGrace = 2 * time.Second

// request is one line from the code.
type request struct {
	ID    int64           `json:"id"`
	Op    string          `json:"op"`
	Tool  string          `json:"tool"`
	Input json.RawMessage `json:"input"`
	Value json.RawMessage `json:"value"`
}

// answer is what tools.call resolves to: the nested call's ToolOutput plus
// where it was recorded.
type answer struct {
	Status    int                  `json:"status"`
	ReceiptID string               `json:"receipt_id"`
	Decision  *wire.DecisionResult `json:"decision"`
	wire.ToolOutput
}

// openBridge makes the two FIFOs (mode 0600, in the 0700 run directory)
// and opens both ends the gateway uses. Opening a FIFO O_RDWR never blocks
// on Linux, so the gateway is ready before Deno starts, and Deno's own
// opens do not block either.
func openBridge(reqPath, respPath string, d tools.Dispatcher, maxCalls, maxResult int) (*bridge, error) {
	for _, p := range []string{reqPath, respPath} {
		if err := unix.Mkfifo(p, 0o600); err != nil {
			return nil, fmt.Errorf("coderun: mkfifo %s: %w", p, err)
		}
	}
	req, err := os.OpenFile(reqPath, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("coderun: opening the request fifo: %w", err)
	}
	resp, err := os.OpenFile(respPath, os.O_RDWR, 0)
	if err != nil {
		_ = req.Close()
		return nil, fmt.Errorf("coderun: opening the answer fifo: %w", err)
	}
	return &bridge{req: req, resp: resp, disp: d, maxCalls: maxCalls, maxResult: maxResult, calls: ToolCalls{ReceiptIDs: []string{}},
		endOp: "end-" + rand.Text()}, nil
}

func (b *bridge) serve(ctx context.Context) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		b.handle(ctx)
	}()
}

// close ends the channel and waits for the handler (a nested call in
// flight ends with ctx, which the caller cancels first). The code has
// ended, but the lines it wrote last (its result) may still be in the
// request FIFO: an end marker goes in behind them and the handler reads up
// to it (for at most closeGrace) before the FIFOs are closed.
func (b *bridge) close() {
	done := make(chan struct{})
	go func() { b.wg.Wait(); close(done) }()
	end, _ := json.Marshal(request{Op: b.endOp})
	if b.req.SetWriteDeadline(time.Now().Add(closeGrace)) == nil {
		if _, err := b.req.Write(append(end, '\n')); err == nil {
			select {
			case <-done:
			case <-time.After(closeGrace):
			}
		}
	}
	_ = b.req.Close()
	_ = b.resp.Close()
	<-done
}

func (b *bridge) handle(ctx context.Context) {
	sc := bufio.NewScanner(b.req)
	sc.Buffer(make([]byte, 64<<10), maxBridgeLine)
	enc := json.NewEncoder(b.resp)
	defer func() {
		if errors.Is(sc.Err(), bufio.ErrTooLong) {
			b.mu.Lock()
			b.result, b.resultTruncated = nil, true
			b.mu.Unlock()
		}
	}()
	for sc.Scan() {
		var req request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			return // not the bridge speaking: stop answering
		}
		if req.Op == b.endOp {
			return
		}
		if req.Op == "result" {
			b.setResult(req.Value)
			continue
		}
		ans, ok := b.call(ctx, req)
		if !ok {
			// Over the budget: the run is being stopped. No answer, so
			// the code cannot go on as if the call had merely failed.
			return
		}
		if err := enc.Encode(map[string]any{"id": req.ID, "answer": ans}); err != nil {
			return
		}
	}
}

func (b *bridge) setResult(v json.RawMessage) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(v) > b.maxResult {
		b.result, b.resultTruncated = nil, true
		return
	}
	b.result = append(json.RawMessage(nil), v...)
}

// call runs one nested tool call. Past the budget it stops the run and
// answers nothing (ok false).
func (b *bridge) call(ctx context.Context, req request) (ans answer, ok bool) {
	refuse := func(code wire.Code, field, format string, a ...any) (answer, bool) {
		return answer{ToolOutput: wire.ToolOutput{Error: wire.FieldError(code, field, format, a...), Metadata: map[string]any{}}}, true
	}
	if req.Tool == "" {
		return refuse(wire.CodeInvalidInput, "tool", "tools.call needs a tool name")
	}
	if b.disp == nil {
		return refuse(wire.CodeInternal, "tool", "this gateway gives code.run no way to call tools")
	}
	b.mu.Lock()
	if b.calls.Count >= b.maxCalls {
		// Past the budget the run ends (seed 004): the code is stopped
		// and the call fails, rather than running on with every further
		// tool call refused.
		b.calls.Refused++
		first := !b.overBudget
		b.overBudget = true
		b.mu.Unlock()
		if first && b.stop != nil {
			b.stop()
		}
		return answer{}, false
	}
	b.calls.Count++
	b.mu.Unlock()
	input := req.Input
	if len(input) == 0 || string(input) == "null" {
		input = json.RawMessage(`{}`)
	}
	status, resp := b.disp.Dispatch(ctx, req.Tool, input)
	b.mu.Lock()
	if resp.ReceiptID != "" {
		b.calls.ReceiptIDs = append(b.calls.ReceiptIDs, resp.ReceiptID)
	}
	if resp.Decision == nil || !resp.Decision.Allow {
		b.calls.Denied++
	}
	b.mu.Unlock()
	if resp.Output.Metadata == nil {
		resp.Output.Metadata = map[string]any{}
	}
	return answer{Status: status, ReceiptID: resp.ReceiptID, Decision: resp.Decision, ToolOutput: resp.Output}, true
}

// snapshot returns what the run's bridge saw.
func (b *bridge) snapshot() (calls ToolCalls, result json.RawMessage, resultTruncated, overBudget bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	calls = b.calls
	calls.ReceiptIDs = append([]string{}, b.calls.ReceiptIDs...)
	return calls, b.result, b.resultTruncated, b.overBudget
}
