package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/portcullis/portcullis/wire"
)

// maxPoll is the longest single long poll WaitForApproval asks for; it
// stays below the client's per-request timeout.
const maxPoll = 25 * time.Second

// ToolCall is GET /v1/tool-calls/{receiptID}?wait=: the answer of a call
// that was parked for approval (contract section 9), once decided, or
// its pending answer when wait ends first. done reports whether the answer
// is final. A final answer that is a failure (approval_rejected,
// approval_expired, or the run's own error status) returns the response
// and an *Error, as Call does.
func (c *Client) ToolCall(ctx context.Context, receiptID string, wait time.Duration) (resp *wire.ToolCallResponse, done bool, err error) {
	q := url.Values{}
	if wait > 0 {
		q.Set("wait", wait.Round(time.Millisecond).String())
	}
	status, b, err := c.do(ctx, http.MethodGet, "/v1/tool-calls/"+url.PathEscape(receiptID), q, nil, retryRead)
	if err != nil {
		return nil, false, err
	}
	var r wire.ToolCallResponse
	if jerr := json.Unmarshal(b, &r); jerr != nil || (r.Decision == nil && r.ReceiptID == "") {
		var eb wire.ErrorBody
		if json.Unmarshal(b, &eb) == nil && eb.Error != nil {
			return nil, false, fromWire(status, eb.Error)
		}
		return nil, false, nonContractError(status, b)
	}
	switch status {
	case http.StatusOK:
		return &r, true, nil
	case http.StatusAccepted:
		return &r, false, nil
	}
	e := fromWire(status, r.Output.Error)
	e.ReceiptID, e.Response = r.ReceiptID, &r
	return &r, true, e
}

// ErrApprovalPending is returned by WaitForApproval when the timeout
// passed before anyone decided the call; the call stays parked until its
// approval TTL.
var ErrApprovalPending = errors.New("portcullis: the call is still waiting for approval")

// WaitForApproval waits up to timeout for the call parked in resp (a 202
// approval_required answer: Call returns it with an *Error of that code)
// to be approved and run, rejected or expired, long-polling the gateway.
// It returns the final answer as Call would (the run's response; an
// *Error for approval_rejected, approval_expired or a failed run), or the
// pending answer and ErrApprovalPending when timeout passes first. A resp
// that is not parked is returned as it is.
func (c *Client) WaitForApproval(ctx context.Context, resp *wire.ToolCallResponse, timeout time.Duration) (*wire.ToolCallResponse, error) {
	if resp == nil || resp.Approval == nil || resp.Approval.Status != wire.ApprovalPending {
		return resp, nil
	}
	if resp.ReceiptID == "" {
		return resp, fmt.Errorf("portcullis: a parked answer without a receipt id")
	}
	deadline := time.Now().Add(timeout)
	last := resp
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return last, ErrApprovalPending
		}
		wait := min(left, maxPoll)
		if c.timeout > 0 {
			wait = min(wait, max(c.timeout-5*time.Second, time.Second))
		}
		r, done, err := c.ToolCall(ctx, resp.ReceiptID, wait)
		if done || (err != nil && r == nil) {
			return r, err
		}
		if r != nil {
			last = r
		}
		if ctx.Err() != nil {
			return last, ctx.Err()
		}
	}
}
