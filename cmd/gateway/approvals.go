package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/portcullis/portcullis/wire"
)

const approvalsUsage = `usage:
  gateway approvals list [--status pending|approved|rejected|expired|stopped] [--url URL] [--json]
  gateway approvals approve ID [--reason R] [--url URL]
  gateway approvals reject ID [--reason R] [--url URL]
The gateway's URL: --url or PORTCULLIS_URL (default http://127.0.0.1:8080).
The key of an approver (role approver or admin): PORTCULLIS_API_KEY, never a flag`

// cmdApprovals is `gateway approvals list|approve|reject`: a client of the
// REST API (approving runs the parked call, which only a serving gateway
// can do), authenticated by the key in PORTCULLIS_API_KEY.
func cmdApprovals(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New(approvalsUsage)
	}
	fs := flag.NewFlagSet("approvals "+args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	base := fs.String("url", envOr("PORTCULLIS_URL", "http://127.0.0.1:8080"), "the gateway's URL")
	status := fs.String("status", "pending", "list: approvals with this status (empty: all)")
	reason := fs.String("reason", "", "approve, reject: the reason recorded with the decision")
	asJSON := fs.Bool("json", false, "list: print the JSON answer")
	rest := args[1:]
	var id string
	if (args[0] == "approve" || args[0] == "reject") && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		id, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		return fmt.Errorf("%w\n%s", err, approvalsUsage)
	}
	key := os.Getenv("PORTCULLIS_API_KEY")
	if key == "" {
		return errors.New("PORTCULLIS_API_KEY is not set: the key of an approver (role approver or admin)")
	}
	c := apiClient{base: strings.TrimRight(*base, "/"), key: key, http: &http.Client{Timeout: 11 * time.Minute}}
	switch args[0] {
	case "list":
		var list wire.ApprovalList
		raw, err := c.do(ctx, http.MethodGet, "/v1/approvals?status="+url.QueryEscape(*status), nil, &list)
		if err != nil {
			return err
		}
		if *asJSON {
			_, err := stdout.Write(raw)
			return err
		}
		for _, a := range list.Approvals {
			fmt.Fprintf(stdout, "%s\t%s\t%s\t%s\texpires %s\t%s\n", a.ID, a.Status, a.PrincipalID, a.Tool, a.ExpiresAt.Format(time.RFC3339), a.Reason)
		}
		return nil
	case "approve", "reject":
		if id == "" || fs.NArg() > 0 {
			return errors.New(approvalsUsage)
		}
		var res wire.ApprovalResult
		if _, err := c.do(ctx, http.MethodPost, "/v1/approvals/"+url.PathEscape(id), wire.ApprovalDecision{Decision: args[0], Reason: *reason}, &res); err != nil {
			return err
		}
		code := "none"
		if e := res.Result.Output.Error; e != nil {
			code = string(e.Code)
		}
		fmt.Fprintf(stdout, "%s %s by %s: the call answered HTTP %d (error %s), receipt %s\n", res.Approval.ID, res.Approval.Status, res.Approval.DecidedBy, res.Status, code, res.Approval.ReceiptID)
		return nil
	}
	return errors.New(approvalsUsage)
}

// apiClient calls the gateway's REST API with a bearer key.
type apiClient struct {
	base string
	key  string
	http *http.Client
}

// do sends body (JSON, when not nil) and decodes a 2xx answer into out;
// any other answer is an error carrying the API's code and message.
func (c apiClient) do(ctx context.Context, method, path string, body, out any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		var eb wire.ErrorBody
		if json.Unmarshal(raw, &eb) == nil && eb.Error != nil {
			return raw, fmt.Errorf("HTTP %d %s: %s", resp.StatusCode, eb.Error.Code, eb.Error.Message)
		}
		return raw, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return raw, json.Unmarshal(raw, out)
}
