package sdk

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/portcullis/portcullis/wire"
)

// Defaults. The request timeout covers the longest Exec the contract allows
// (600 s) plus the gateway's kill grace and some slack.
const (
	DefaultTimeout    = 11 * time.Minute
	DefaultRetries    = 3
	DefaultBackoff    = 250 * time.Millisecond
	DefaultMaxBackoff = 8 * time.Second
	// maxResponseBytes bounds what the client reads of one answer.
	maxResponseBytes = 64 << 20
)

// Client talks to one gateway with one credential: an API key, a token
// provider (WithTokenProvider, for JWTs from an identity provider), or a
// client certificate (WithClientCertificate, mTLS). It is safe for
// concurrent use.
type Client struct {
	base       *url.URL
	key        string
	token      TokenProvider
	tlsErr     error
	hc         *http.Client
	timeout    time.Duration
	retries    int
	backoff    time.Duration
	maxBackoff time.Duration
	userAgent  string
	sleep      func(context.Context, time.Duration) error
}

// Option configures a Client.
type Option func(*Client)

// WithTimeout bounds each attempt of a request (0: no bound beyond ctx).
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithRetries sets how many times a retryable answer (see the package
// comment) is retried; 0 disables retries.
func WithRetries(n int) Option {
	return func(c *Client) {
		if n >= 0 {
			c.retries = n
		}
	}
}

// WithBackoff sets the first retry delay and the cap; delays double per
// attempt, with jitter. A Retry-After from the gateway is honoured up
// to the cap.
func WithBackoff(base, max time.Duration) Option {
	return func(c *Client) {
		if base > 0 {
			c.backoff = base
		}
		if max >= base && max > 0 {
			c.maxBackoff = max
		}
	}
}

// WithHTTPClient uses hc (its transport, proxies, TLS settings) for requests.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.hc = hc
		}
	}
}

// TokenProvider returns the bearer token to send, fresh: it is called
// before every attempt of every request, so it should cache the token and
// renew it shortly before it expires (an oauth2.TokenSource fits:
// func(ctx) { t, err := src.Token(); return t.AccessToken, err }).
type TokenProvider func(ctx context.Context) (string, error)

// WithTokenProvider authenticates with the token p returns (a JWT from the
// gateway's configured identity provider) instead of the API key.
func WithTokenProvider(p TokenProvider) Option { return func(c *Client) { c.token = p } }

// WithTLSConfig uses cfg for HTTPS to the gateway (a CA bundle in RootCAs,
// a client certificate for mTLS in Certificates). It replaces the HTTP
// client's transport with one that uses cfg; apply WithHTTPClient first if
// both are given.
func WithTLSConfig(cfg *tls.Config) Option {
	return func(c *Client) {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = cfg.Clone()
		hc := *c.hc
		hc.Transport = t
		c.hc = &hc
	}
}

// WithCAFile trusts the PEM certificates in path (the gateway's CA) for
// HTTPS, beside the system roots. A file that does not load makes every
// request fail with the reason.
func WithCAFile(path string) Option {
	return func(c *Client) {
		cfg := c.tlsConfig()
		pemBytes, err := os.ReadFile(path)
		if err != nil {
			c.tlsErr = fmt.Errorf("portcullis: CA file: %w", err)
			return
		}
		var pool *x509.CertPool
		if cfg.RootCAs != nil {
			pool = cfg.RootCAs.Clone()
		} else if pool, err = x509.SystemCertPool(); err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pemBytes) {
			c.tlsErr = fmt.Errorf("portcullis: CA file %s holds no PEM certificate", path)
			return
		}
		cfg.RootCAs = pool
		WithTLSConfig(cfg)(c)
	}
}

// WithClientCertificate presents the PEM certificate and key in certFile
// and keyFile to the gateway (mTLS). They are read when the option is
// applied; a pair that does not load makes every request fail.
func WithClientCertificate(certFile, keyFile string) Option {
	return func(c *Client) {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			c.tlsErr = fmt.Errorf("portcullis: client certificate: %w", err)
			return
		}
		cfg := c.tlsConfig()
		cfg.Certificates = []tls.Certificate{pair}
		WithTLSConfig(cfg)(c)
	}
}

// tlsConfig is a copy of the client's current TLS config (or a new one).
func (c *Client) tlsConfig() *tls.Config {
	if t, ok := c.hc.Transport.(*http.Transport); ok && t.TLSClientConfig != nil {
		return t.TLSClientConfig.Clone()
	}
	return &tls.Config{MinVersion: tls.VersionTLS12}
}

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// New returns a client for the gateway at baseURL (e.g.
// "http://127.0.0.1:8080") authenticating with apiKey ("" sends no key:
// with WithTokenProvider or WithClientCertificate). An unparsable baseURL
// makes every request fail with that error.
func New(baseURL, apiKey string, opts ...Option) *Client {
	c := &Client{
		key: apiKey, hc: http.DefaultClient, timeout: DefaultTimeout,
		retries: DefaultRetries, backoff: DefaultBackoff, maxBackoff: DefaultMaxBackoff,
		userAgent: "portcullis-go-sdk/1", sleep: sleepCtx,
	}
	if u, err := url.Parse(strings.TrimRight(baseURL, "/")); err == nil && u.Scheme != "" && u.Host != "" {
		c.base = u
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// CallOption sets optional fields of a tool call.
type CallOption func(*wire.ToolCallRequest)

// WithCallID sets call_id (e.g. the model's tool_call_id); it is echoed and
// recorded in the receipt.
func WithCallID(id string) CallOption { return func(r *wire.ToolCallRequest) { r.CallID = id } }

// WithSessionID sets session_id (one agent run); receipts can be filtered by it.
func WithSessionID(id string) CallOption { return func(r *wire.ToolCallRequest) { r.SessionID = id } }

// Call runs tool with input (any JSON-marshalable object, or json.RawMessage)
// through the gateway. On 200 it returns the response and nil, even when the
// tool itself failed (output.success false): the tool ran and has a receipt.
// Any other status returns the parsed response (when the body was one) and
// an *Error with the contract code.
func (c *Client) Call(ctx context.Context, tool string, input any, opts ...CallOption) (*wire.ToolCallResponse, error) {
	body, err := encodeCall(tool, input, opts, "tool call")
	if err != nil {
		return nil, err
	}
	status, b, err := c.do(ctx, http.MethodPost, "/v1/tool-calls", nil, body, retryToolCall)
	if err != nil {
		return nil, err
	}
	var resp wire.ToolCallResponse
	if jerr := json.Unmarshal(b, &resp); jerr != nil {
		if status == http.StatusOK {
			return nil, fmt.Errorf("portcullis: tool-call answer is not JSON: %w", jerr)
		}
		return nil, nonContractError(status, b)
	}
	if status != http.StatusOK {
		e := fromWire(status, resp.Output.Error)
		e.ReceiptID, e.Response = resp.ReceiptID, &resp
		return &resp, e
	}
	return &resp, nil
}

// encodeCall is the body of a tool call or a dry run: the tool, its input
// and the options; what names the request in an error.
func encodeCall(tool string, input any, opts []CallOption, what string) ([]byte, error) {
	raw, err := toRaw(input)
	if err != nil {
		return nil, err
	}
	req := wire.ToolCallRequest{Tool: tool, Input: raw}
	for _, o := range opts {
		o(&req)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("portcullis: encode %s: %w", what, err)
	}
	return body, nil
}

// Decide is a dry run (POST /v1/decisions): what the policy and enforcement
// would say of this call, without running it or writing a receipt.
func (c *Client) Decide(ctx context.Context, tool string, input any, opts ...CallOption) (*wire.DryRunResponse, error) {
	body, err := encodeCall(tool, input, opts, "decision request")
	if err != nil {
		return nil, err
	}
	var out wire.DryRunResponse
	return &out, c.getJSON(ctx, http.MethodPost, "/v1/decisions", nil, body, &out)
}

// Tools lists the tools this caller may call, as OpenAI function tools
// (pass them to the model as its tools). Each is named by its model-safe
// name (fs.read is fs_read), which every gateway endpoint accepts as well
// as the tool's own name; ToolList has the map between the two.
func (c *Client) Tools(ctx context.Context) ([]wire.FunctionTool, error) {
	l, err := c.ToolList(ctx)
	if err != nil {
		return nil, err
	}
	return l.Tools, nil
}

// ToolList is GET /v1/tools in full: the tools as Tools returns them and
// Names, each listed model-safe name mapped to the tool's own name.
func (c *Client) ToolList(ctx context.Context) (*wire.ToolList, error) {
	var out wire.ToolList
	if err := c.getJSON(ctx, http.MethodGet, "/v1/tools", nil, nil, &out); err != nil {
		return nil, err
	}
	if out.Names == nil {
		out.Names = map[string]string{}
	}
	return &out, nil
}

// ReceiptFilter narrows GET /v1/receipts; zero fields are not sent.
type ReceiptFilter struct {
	Principal, Tool, Decision, SessionID string
	Since, Until                         time.Time
	Limit                                int
	Cursor                               string
}

func (f ReceiptFilter) query() url.Values {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("principal", f.Principal)
	set("tool", f.Tool)
	set("decision", f.Decision)
	set("session_id", f.SessionID)
	set("cursor", f.Cursor)
	if !f.Since.IsZero() {
		q.Set("since", f.Since.UTC().Format(time.RFC3339Nano))
	}
	if !f.Until.IsZero() {
		q.Set("until", f.Until.UTC().Format(time.RFC3339Nano))
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	return q
}

// Receipts lists receipts (auditor role). Pass the answer's NextCursor as
// Cursor for the next page; it is empty on the last one.
func (c *Client) Receipts(ctx context.Context, f ReceiptFilter) (*wire.ReceiptList, error) {
	var out wire.ReceiptList
	if err := c.getJSON(ctx, http.MethodGet, "/v1/receipts", f.query(), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Receipt fetches one receipt by id (auditor role).
func (c *Client) Receipt(ctx context.Context, id string) (*wire.Receipt, error) {
	var out wire.Receipt
	if err := c.getJSON(ctx, http.MethodGet, "/v1/receipts/"+url.PathEscape(id), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// getJSON runs a side-effect-free request and decodes a 200 into out.
func (c *Client) getJSON(ctx context.Context, method, path string, q url.Values, body []byte, out any) error {
	status, b, err := c.do(ctx, method, path, q, body, retryRead)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		var eb wire.ErrorBody
		if json.Unmarshal(b, &eb) != nil || eb.Error == nil {
			return nonContractError(status, b)
		}
		return fromWire(status, eb.Error)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("portcullis: %s %s answer is not JSON: %w", method, path, err)
	}
	return nil
}

// retryPolicy says whether an answer may be retried.
type retryPolicy func(status int, body []byte) bool

// retryToolCall retries only answers that prove nothing ran: 429, and 503
// whose code says the call was refused before dispatch. A 503
// backend_unavailable may come from a call that started, so it is not
// retried; neither is any 200 or 4xx.
func retryToolCall(status int, body []byte) bool {
	switch status {
	case http.StatusTooManyRequests:
		return true
	case http.StatusServiceUnavailable:
		var resp wire.ToolCallResponse
		if json.Unmarshal(body, &resp) != nil || resp.Output.Error == nil {
			return false
		}
		switch resp.Output.Error.Code {
		case wire.CodeEvidenceUnavailable, wire.CodeSandboxUnavailable:
			return true
		}
	}
	return false
}

// retryRead retries reads on any 429 or 503: they change nothing.
func retryRead(status int, _ []byte) bool {
	return status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable
}

// do sends one request with retries and returns the final status and body.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body []byte, retry retryPolicy) (int, []byte, error) {
	if c.base == nil {
		return 0, nil, errors.New("portcullis: invalid base URL (want e.g. http://127.0.0.1:8080)")
	}
	if c.tlsErr != nil {
		return 0, nil, c.tlsErr
	}
	u := *c.base
	u.Path = strings.TrimRight(u.Path, "/") + path
	if len(q) > 0 {
		u.RawQuery = q.Encode()
	}
	for attempt := 0; ; attempt++ {
		status, b, h, err := c.once(ctx, method, u.String(), body)
		if err != nil {
			return 0, nil, err
		}
		if attempt >= c.retries || !retry(status, b) {
			return status, b, nil
		}
		if err := c.sleep(ctx, c.delay(attempt, h)); err != nil {
			return status, b, nil // out of time: the last answer stands
		}
	}
}

func (c *Client) once(ctx context.Context, method, u string, body []byte) (int, []byte, http.Header, error) {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("portcullis: %w", err)
	}
	switch {
	case c.token != nil:
		tok, err := c.token(ctx)
		if err != nil {
			return 0, nil, nil, fmt.Errorf("portcullis: token provider: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	case c.key != "":
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	// The caller's span, if any, continues into the gateway and its receipt.
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("portcullis: %s %s: %w", method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("portcullis: read %s %s answer: %w", method, req.URL.Path, err)
	}
	return resp.StatusCode, b, resp.Header, nil
}

// delay is the wait before retry attempt+1: Retry-After when the gateway
// sent one (capped), else a random point in the upper half of an
// exponentially growing window ("equal jitter": never zero, never in step).
func (c *Client) delay(attempt int, h http.Header) time.Duration {
	if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil && s >= 0 {
		return min(time.Duration(s)*time.Second, c.maxBackoff)
	}
	window := c.backoff << min(attempt, 20)
	if window <= 0 || window > c.maxBackoff {
		window = c.maxBackoff
	}
	return window/2 + rand.N(window/2+1)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func toRaw(input any) (json.RawMessage, error) {
	switch v := input.(type) {
	case nil:
		return json.RawMessage("{}"), nil
	case json.RawMessage:
		return v, nil
	case []byte:
		return json.RawMessage(v), nil
	}
	b, err := json.Marshal(input)
	if err != nil {
		return nil, fmt.Errorf("portcullis: encode tool input: %w", err)
	}
	return b, nil
}

func nonContractError(status int, b []byte) *Error {
	msg := strings.TrimSpace(string(b))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	return &Error{Status: status, Message: msg}
}
