package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/portcullis/portcullis/wire"
)

// approvalsCmd is `gateway approvals list|approve|reject`: a client of the
// REST API (approving runs the parked call, which only a serving gateway
// can do), authenticated by the key in PORTCULLIS_API_KEY, never a flag
// (argv is readable by other users in the process table).
func approvalsCmd() *cobra.Command {
	urlFlag := func(c *cobra.Command) *string {
		return c.Flags().String("url", envOr("PORTCULLIS_URL", "http://127.0.0.1:8080"), "the gateway's URL (or PORTCULLIS_URL)")
	}
	list := &cobra.Command{Use: "list [--status S] [--url URL] [--json]", Short: "parked calls (role approver, admin or auditor)", Args: noArgs}
	listURL := urlFlag(list)
	status := list.Flags().String("status", "pending", "approvals with this status: pending, approved, rejected, expired, stopped (empty: all)")
	asJSON := list.Flags().Bool("json", false, "print the JSON answer")
	list.RunE = func(c *cobra.Command, _ []string) error {
		api, err := approvalsClient(*listURL)
		if err != nil {
			return err
		}
		return approvalsList(c.Context(), api, *status, *asJSON, c.OutOrStdout())
	}
	decide := func(decision, short string) *cobra.Command {
		d := &cobra.Command{Use: decision + " ID [--reason R] [--url URL]", Short: short, Args: exactArgs(1)}
		u := urlFlag(d)
		reason := d.Flags().String("reason", "", "the reason recorded with the decision")
		d.RunE = func(c *cobra.Command, args []string) error {
			api, err := approvalsClient(*u)
			if err != nil {
				return err
			}
			return approvalsDecide(c.Context(), api, args[0], decision, *reason, c.OutOrStdout())
		}
		return d
	}
	return group("approvals", "list and decide parked calls (key in PORTCULLIS_API_KEY)", list,
		decide("approve", "approve a parked call: it is re-decided and runs (role approver or admin; not your own)"),
		decide("reject", "reject a parked call (role approver or admin)"))
}

func approvalsClient(base string) (apiClient, error) {
	key := os.Getenv("PORTCULLIS_API_KEY")
	if key == "" {
		return apiClient{}, errors.New("PORTCULLIS_API_KEY is not set: the key of an approver (role approver or admin)")
	}
	return apiClient{base: strings.TrimRight(base, "/"), key: key, http: &http.Client{Timeout: 11 * time.Minute}}, nil
}

func approvalsList(ctx context.Context, c apiClient, status string, asJSON bool, stdout io.Writer) error {
	var list wire.ApprovalList
	raw, err := c.do(ctx, http.MethodGet, "/v1/approvals?status="+url.QueryEscape(status), nil, &list)
	if err != nil {
		return err
	}
	if asJSON {
		_, err := stdout.Write(raw)
		return err
	}
	for _, a := range list.Approvals {
		fmt.Fprintf(stdout, "%s\t%s\t%s\t%s\texpires %s\t%s\n", a.ID, a.Status, a.PrincipalID, a.Tool, a.ExpiresAt.Format(time.RFC3339), a.Reason)
	}
	return nil
}

func approvalsDecide(ctx context.Context, c apiClient, id, decision, reason string, stdout io.Writer) error {
	var res wire.ApprovalResult
	if _, err := c.do(ctx, http.MethodPost, "/v1/approvals/"+url.PathEscape(id), wire.ApprovalDecision{Decision: decision, Reason: reason}, &res); err != nil {
		return err
	}
	code := "none"
	if e := res.Result.Output.Error; e != nil {
		code = string(e.Code)
	}
	fmt.Fprintf(stdout, "%s %s by %s: the call answered HTTP %d (error %s), receipt %s\n", res.Approval.ID, res.Approval.Status, res.Approval.DecidedBy, res.Status, code, res.Approval.ReceiptID)
	return nil
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
