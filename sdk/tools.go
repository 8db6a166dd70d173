package sdk

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/portcullis/portcullis/wire"
)

// Typed helpers for the built-in tools. Each returns the tool's decoded data
// with the full response, and an *Error whenever the output carries an error
// (a refusal, a tool failure such as not_found, or an Exec timeout — whose
// data, with timed_out set, is still returned). A program that merely exits
// non-zero is not an error: read ExitCode.

// Result is a typed tool result.
type Result[T any] struct {
	Data     *T                     // nil when the tool returned no data
	Response *wire.ToolCallResponse // the whole answer: receipt, decision, output
}

// ReceiptID names the call's receipt.
func (r *Result[T]) ReceiptID() string {
	if r == nil || r.Response == nil {
		return ""
	}
	return r.Response.ReceiptID
}

// CallTyped calls tool and decodes output.data into T.
func CallTyped[T any](ctx context.Context, c *Client, tool string, input any, opts ...CallOption) (*Result[T], error) {
	resp, err := c.Call(ctx, tool, input, opts...)
	if resp == nil {
		return nil, err
	}
	res := &Result[T]{Response: resp}
	if resp.Output.Data != nil {
		b, merr := json.Marshal(resp.Output.Data)
		var v T
		if merr == nil {
			merr = json.Unmarshal(b, &v)
		}
		if merr != nil && err == nil {
			return res, fmt.Errorf("portcullis: %s data does not decode: %w", tool, merr)
		}
		if merr == nil {
			res.Data = &v
		}
	}
	if err == nil && resp.Output.Error != nil {
		e := fromWire(200, resp.Output.Error)
		e.ReceiptID, e.Response = resp.ReceiptID, resp
		err = e
	}
	return res, err
}

// ExecInput is the input of Exec: argv[0] absolute, never a shell.
type ExecInput struct {
	Argv           []string          `json:"argv"`
	Cwd            string            `json:"cwd,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	TimeoutS       int               `json:"timeout_s,omitempty"`
	MaxOutputBytes int               `json:"max_output_bytes,omitempty"`
}

// ExecData is what Exec returns (wire.ExecData).
type ExecData = wire.ExecData

// Exec runs a program.
func (c *Client) Exec(ctx context.Context, in ExecInput, opts ...CallOption) (*Result[ExecData], error) {
	return CallTyped[ExecData](ctx, c, "Exec", in, opts...)
}

// FSReadInput is the input of fs.read; lines are 1-based and inclusive.
type FSReadInput struct {
	Path      string `json:"path"`
	StartLine int    `json:"startLine,omitempty"`
	EndLine   int    `json:"endLine,omitempty"`
}

// FSReadData is what fs.read returns; Content is nil for binary files.
type FSReadData struct {
	Path          string  `json:"path"`
	Content       *string `json:"content"`
	Bytes         int64   `json:"bytes"`
	SHA256        string  `json:"sha256"`
	Binary        bool    `json:"binary"`
	Truncated     bool    `json:"truncated"`
	StartLine     int     `json:"startLine"`
	EndLine       int     `json:"endLine"`
	TotalLines    int     `json:"totalLines"`
	NextStartLine int     `json:"nextStartLine,omitempty"`
	Hint          string  `json:"hint,omitempty"`
}

// FSRead reads a file under the granted scope.
func (c *Client) FSRead(ctx context.Context, in FSReadInput, opts ...CallOption) (*Result[FSReadData], error) {
	return CallTyped[FSReadData](ctx, c, "fs.read", in, opts...)
}

// FSWriteInput is the input of fs.write. IfMatchSHA256 nil means no
// precondition; a pointer to "" requires that the file does not exist.
type FSWriteInput struct {
	Path          string  `json:"path"`
	Content       string  `json:"content"`
	IfMatchSHA256 *string `json:"ifMatchSha256,omitempty"`
}

// FSWriteData is what fs.write returns.
type FSWriteData struct {
	Path         string `json:"path"`
	BytesWritten int    `json:"bytesWritten"`
	SHA256After  string `json:"sha256After"`
	SHA256Before string `json:"sha256Before,omitempty"`
	Created      bool   `json:"created"`
}

// FSWrite writes a file atomically.
func (c *Client) FSWrite(ctx context.Context, in FSWriteInput, opts ...CallOption) (*Result[FSWriteData], error) {
	return CallTyped[FSWriteData](ctx, c, "fs.write", in, opts...)
}

// FSListInput is the input of fs.list.
type FSListInput struct {
	Path       string `json:"path"`
	MaxEntries int    `json:"maxEntries,omitempty"`
}

// FSListData is what fs.list returns.
type FSListData struct {
	Path    string `json:"path"`
	Entries []struct {
		Name string `json:"name"`
		Type string `json:"type"`
		Size int64  `json:"size"`
	} `json:"entries"`
	Truncated bool `json:"truncated"`
	Total     int  `json:"total"`
}

// FSList lists a directory.
func (c *Client) FSList(ctx context.Context, in FSListInput, opts ...CallOption) (*Result[FSListData], error) {
	return CallTyped[FSListData](ctx, c, "fs.list", in, opts...)
}

// FSSearchInput is the input of fs.search: Pattern is a substring or /re/flags.
type FSSearchInput struct {
	Path       string `json:"path"`
	Pattern    string `json:"pattern"`
	Before     int    `json:"before,omitempty"`
	After      int    `json:"after,omitempty"`
	MaxMatches int    `json:"maxMatches,omitempty"`
}

// FSSearchData is what fs.search returns (matches decoded; stats kept raw).
type FSSearchData struct {
	Path    string `json:"path"`
	Pattern string `json:"pattern"`
	Matches []struct {
		Path   string   `json:"path"`
		Line   int      `json:"line"`
		Text   string   `json:"text"`
		Before []string `json:"before"`
		After  []string `json:"after"`
	} `json:"matches"`
	Truncated   bool            `json:"truncated"`
	TruncatedBy string          `json:"truncatedBy,omitempty"`
	Stats       json.RawMessage `json:"stats"`
}

// FSSearch searches files under a path.
func (c *Client) FSSearch(ctx context.Context, in FSSearchInput, opts ...CallOption) (*Result[FSSearchData], error) {
	return CallTyped[FSSearchData](ctx, c, "fs.search", in, opts...)
}

// HTTPGetInput is the input of http.get.
type HTTPGetInput struct {
	URL      string            `json:"url"`
	Headers  map[string]string `json:"headers,omitempty"`
	MaxBytes int               `json:"max_bytes,omitempty"`
	TimeoutS int               `json:"timeout_s,omitempty"`
	// FollowRedirects false returns a redirect response itself; nil (the
	// default) follows up to 5, each hop decided by the policy and
	// recorded as a call of its own.
	FollowRedirects *bool `json:"follow_redirects,omitempty"`
}

// HTTPGetData is what http.get returns; Body is base64 when Encoding says so.
type HTTPGetData struct {
	Status    int               `json:"status"`
	Headers   map[string]string `json:"headers"`
	Body      string            `json:"body"`
	Encoding  string            `json:"encoding"`
	Truncated bool              `json:"truncated"`
	Bytes     int               `json:"bytes"`
	URL       string            `json:"url"`
	Redirects []string          `json:"redirects"`
	// Hops are the redirects followed, each with the receipt of the
	// governed call that fetched it.
	Hops []struct {
		URL       string `json:"url"`
		ReceiptID string `json:"receipt_id"`
		Status    int    `json:"status"`
	} `json:"hops"`
}

// HTTPGet fetches a URL under the call's network posture.
func (c *Client) HTTPGet(ctx context.Context, in HTTPGetInput, opts ...CallOption) (*Result[HTTPGetData], error) {
	return CallTyped[HTTPGetData](ctx, c, "http.get", in, opts...)
}
