// Package httpget is the http.get tool: one GET of an http(s) URL under the
// decision's network posture, made by the gateway itself. The target's
// host:port is checked against the allowlist before any DNS lookup (a lookup
// of an attacker-chosen name is itself an exfiltration channel), only then
// resolved, private and metadata addresses are refused unless a CIDR grants
// them, and the connection dials exactly the address that was checked, so DNS
// rebinding between check and connect cannot redirect it.
//
// When DNS happens: never in Prepare (before the policy has seen the name),
// never in a dry run (tools.IsDryRun: no receipt, so a lookup there
// would be an unrecorded channel out), and in Enforce only after the
// policy allowed the call, and under posture allowlist only for a name on
// the list.
//
// Every redirect hop is a governed call of its own: Run hands the
// Location back to the pipeline (tools.Dispatcher) as http.get with
// follow_redirects false, so the policy decides each hop with purpose
// "call" exactly as if the caller had asked for that URL, each hop gets
// its own receipt (parent_receipt_id: the first call's), and a hop the
// policy or the network posture refuses ends the fetch.
package httpget

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"log/slog"

	"github.com/portcullis/portcullis/backends/egress"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/tools/internal/inputschema"
)

// ToolName is the wire name of the tool.
const ToolName = "http.get"

// Backend is what evidence records as having run the call: the gateway's
// own HTTP client.
const Backend = "gateway-http"

// Options configure the tool.
type Options struct {
	// Resolver resolves names that passed the allowlist. Default: the
	// system resolver. Tests point names at loopback servers with it.
	Resolver egress.Resolver
	// RootCAs verifies servers' certificates. Default: the system pool.
	RootCAs *x509.CertPool
	// Logger receives fetch summaries (host, status; never bodies or
	// header values). Default: slog.Default().
	Logger *slog.Logger
}

// Tool is the http.get tool. It is safe for concurrent use.
type Tool struct {
	res     egress.Resolver
	rootCAs *x509.CertPool
	log     *slog.Logger
}

var _ tools.Tool = (*Tool)(nil)

// New returns the http.get tool.
func New(opts Options) *Tool {
	t := &Tool{res: opts.Resolver, rootCAs: opts.RootCAs, log: opts.Logger}
	if t.log == nil {
		t.log = slog.Default()
	}
	return t
}

// Name is the wire name "http.get".
func (t *Tool) Name() string { return ToolName }

// Annotations: one GET, changing nothing here, reaching the network.
func (t *Tool) Annotations() map[string]any { return tools.Hints(true, false, true, true) }

// Description tells a model how to call the tool correctly the first time.
func (t *Tool) Description() string {
	return "Fetch one http:// or https:// URL with GET, under the network policy. " +
		"Only hosts the policy allows are reachable; private and internal addresses are refused unless granted. " +
		"Redirects (at most 5) are followed only where the policy allows a direct call to the new URL: each hop is decided and recorded as a call of its own. " +
		"Optional request headers: accept, accept-language, user-agent. " +
		"Returns status, safe response headers, body (UTF-8 text, or base64 with encoding \"base64\" for binary), " +
		"truncated (body longer than max_bytes), bytes, the final url and the redirects followed."
}

// parametersSchema is the JSON Schema of the input. TestParametersSchema
// keeps it in step with the decoder.
const parametersSchema = `{
  "type": "object",
  "properties": {
    "url": {
      "type": "string",
      "description": "Absolute http:// or https:// URL, without user:password@. E.g. https://api.github.com/repos/o/r",
      "minLength": 1,
      "maxLength": 8192
    },
    "headers": {
      "type": "object",
      "description": "Optional request headers; only accept, accept-language and user-agent are accepted, in any case (never authorization or cookie).",
      "properties": {
        "accept": {"type": "string"},
        "accept-language": {"type": "string"},
        "user-agent": {"type": "string"}
      },
      "additionalProperties": {"type": "string"}
    },
    "max_bytes": {
      "type": "integer",
      "description": "Body cap in bytes (1-16777216, default 1048576); the policy's max_output_bytes may lower it. A longer body is cut and truncated is true.",
      "minimum": 1,
      "maximum": 16777216
    },
    "timeout_s": {
      "type": "integer",
      "description": "Timeout for the whole fetch, redirects and body included (1-120, default 30). The policy may lower it.",
      "minimum": 1,
      "maximum": 120
    },
    "follow_redirects": {
      "type": "boolean",
      "description": "Default true: follow up to 5 redirects, each one checked by the policy as a call of its own. false returns the redirect response itself (status 3xx, headers.location)."
    }
  },
  "required": ["url"],
  "additionalProperties": false
}`

// Parameters is the JSON Schema of the input, shown to models.
func (t *Tool) Parameters() json.RawMessage { return schema.JSON() }

// schema is parametersSchema, advertised and enforced (inputschema).
var schema = inputschema.MustCompile("http.get", parametersSchema)

// Prepare validates and normalizes input; see input.go. It never touches
// the network: no DNS for a name the policy has not yet seen.
func (t *Tool) Prepare(ctx context.Context, input json.RawMessage) (tools.Call, error) {
	in, err := decodeInput(input)
	if err != nil {
		return nil, err
	}
	return &call{tool: t, in: in}, nil
}
