package upstream

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

// printer words schema errors.
var printer = message.NewPrinter(language.English)

// maxResultBytes bounds an upstream result as the gateway passes it on.
const maxResultBytes = 4 << 20

// toolNameRE is what an upstream tool's own name may be (the MCP spec's
// tool name characters), so "<upstream>.<tool>" stays printable and short.
var toolNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,96}$`)

// Tool is one upstream tool as the gateway serves it: "<upstream>.<tool>",
// with the upstream's description and inputSchema, validated against that
// schema before the policy sees the call.
type Tool struct {
	up     *conn
	def    *mcp.Tool
	name   string // "<upstream>.<tool>"
	params json.RawMessage
	schema *jsonschema.Schema
	digest string // definition_sha256
	annot  map[string]any
}

var _ tools.Tool = (*Tool)(nil)

// Name is "<upstream>.<tool>".
func (t *Tool) Name() string { return t.name }

// Description is the upstream's.
func (t *Tool) Description() string { return t.def.Description }

// Parameters is the upstream's inputSchema.
func (t *Tool) Parameters() json.RawMessage { return t.params }

// Digest is the tool's definition digest (definition_sha256).
func (t *Tool) Digest() string { return t.digest }

// Annotations are the upstream's annotations of the tool (readOnlyHint,
// destructiveHint ...), as the policy sees them.
func (t *Tool) Annotations() map[string]any { return t.annot }

// ListFacts is input.resolved for the policy's "list" question: which
// upstream, tool and definition (with its annotations), so rules can grant
// by upstream or by readOnlyHint.
func (t *Tool) ListFacts() map[string]any {
	return map[string]any{"upstream": t.facts()}
}

func (t *Tool) facts() map[string]any {
	return map[string]any{
		"name": t.up.spec.Name, "tool": t.def.Name, "transport": t.up.spec.Transport(),
		"definition_sha256": t.digest, "annotations": t.annot,
	}
}

// newTool builds the served tool for def, or an error saying why the
// gateway cannot serve it (a name it cannot namespace, a schema it cannot
// compile: it would not be able to validate input against it).
func newTool(up *conn, def *mcp.Tool) (*Tool, error) {
	if !toolNameRE.MatchString(def.Name) {
		return nil, fmt.Errorf("tool name %q is not [A-Za-z0-9_.-]{1,96}", def.Name)
	}
	params, err := json.Marshal(def.InputSchema)
	if err != nil || len(params) == 0 || string(params) == "null" {
		params = []byte(`{"type":"object"}`)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	// The compiler's default loader reads file: URLs; a hostile upstream
	// would name local files ($ref or $schema "file:///..."), which the
	// gateway would read (a FIFO hangs it, a huge file fills memory, a
	// JSON secret may be echoed in refusals). The schema is compiled as
	// sent: only its own parts and the built-in meta-schemas resolve.
	c.UseLoader(noLoader{})
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(params))
	if err != nil {
		return nil, fmt.Errorf("inputSchema: %w", err)
	}
	if schemaWork(doc, maxSchemaWork) > maxSchemaWork {
		return nil, fmt.Errorf("inputSchema: checking one input would evaluate more than %d subschemas (references expanded)", maxSchemaWork)
	}
	loc := "urn:portcullis:upstream:" + up.spec.Name + ":" + def.Name
	if err := c.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("inputSchema: %w", err)
	}
	schema, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("inputSchema: %w", err)
	}
	annot := map[string]any{}
	if def.Annotations != nil {
		if b, err := json.Marshal(def.Annotations); err == nil {
			_ = json.Unmarshal(b, &annot)
		}
	}
	return &Tool{up: up, def: def, name: up.spec.Name + "." + def.Name, params: params,
		schema: schema, digest: DefinitionDigest(def), annot: annot}, nil
}

// noLoader loads no schema from anywhere (jsonschema.URLLoader).
type noLoader struct{}

func (noLoader) Load(u string) (any, error) {
	return nil, fmt.Errorf("an upstream's schema may only refer to its own parts and the JSON Schema meta-schemas, not %q", truncate(u, 128))
}

// DefinitionDigest is the sha256 of the canonical JSON of a tool's name,
// description, inputSchema and annotations (contract §8, pinning):
// encoding/json writes maps with sorted keys, so equal definitions give
// equal digests whatever order the upstream sent.
func DefinitionDigest(def *mcp.Tool) string {
	canon := func(v any) any {
		b, err := json.Marshal(v)
		if err != nil {
			return nil
		}
		var out any
		_ = json.Unmarshal(b, &out)
		return out
	}
	b, _ := json.Marshal(map[string]any{
		"name": def.Name, "description": def.Description,
		"inputSchema": canon(def.InputSchema), "annotations": canon(def.Annotations),
	})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Prepare validates input against the upstream's inputSchema: a refusal
// names the field (details.field "input.<path>") and what the schema wants.
func (t *Tool) Prepare(ctx context.Context, input json.RawMessage) (tools.Call, error) {
	if q := t.up.quarantined(t); q != nil {
		return nil, q
	}
	raw := bytes.TrimSpace(input)
	if len(raw) == 0 || string(raw) == "null" {
		raw = []byte("{}")
	}
	if raw[0] != '{' {
		return nil, wire.FieldError(wire.CodeInvalidInput, "input", "input must be a JSON object (the arguments of %s)", t.name)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, wire.FieldError(wire.CodeInvalidInput, "input", "input is not valid JSON: %v", err)
	}
	if err := t.schema.Validate(inst); err != nil {
		return nil, schemaError(t.name, err)
	}
	var args map[string]any
	if err := json.Unmarshal(raw, &args); err != nil {
		return nil, wire.FieldError(wire.CodeInvalidInput, "input", "input must be a JSON object")
	}
	return &call{t: t, raw: json.RawMessage(raw), args: args}, nil
}

// schemaError is the invalid_input refusal for input the schema refused:
// the deepest failing location names the field.
func schemaError(tool string, err error) *wire.Error {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return wire.FieldError(wire.CodeInvalidInput, "input", "input does not match the inputSchema of %s", tool)
	}
	leaf := ve
	for len(leaf.Causes) > 0 {
		leaf = leaf.Causes[0]
	}
	field := "input"
	if len(leaf.InstanceLocation) > 0 {
		field += "." + strings.Join(leaf.InstanceLocation, ".")
	}
	msg := strings.TrimSpace(leaf.ErrorKind.LocalizedString(printer))
	return wire.FieldError(wire.CodeInvalidInput, field, "%s: %s (the inputSchema of %s)", field, msg, tool)
}

// call is one validated upstream call.
type call struct {
	t    *Tool
	raw  json.RawMessage
	args map[string]any
}

func (c *call) Args() map[string]any { return c.args }

// Resolved is input.resolved.upstream: {name, tool, transport,
// definition_sha256, annotations}.
func (c *call) Resolved() map[string]any { return c.t.ListFacts() }

// Enforce gives the call its scope: an upstream call reaches only its
// upstream, which runs under its own launch scope (stdio) or through the
// egress checks (http); the call's limit is the upstream's timeout.
func (c *call) Enforce(ctx context.Context, d wire.Decision) (wire.Scope, error) {
	scope := wire.Scope{FSGrants: []wire.FSGrant{}, EnvNames: []string{},
		Network: wire.Network{Posture: wire.PostureOff, Allow: []string{}},
		Backend: c.t.up.backend()}
	scope.Limits.TimeoutS = int(c.t.up.timeout() / time.Second)
	return scope, nil
}

// Run calls the upstream tool. The upstream's isError is a failed call
// (tool_error, HTTP 200); an upstream that is down is backend_unavailable,
// a slow one timeout.
func (c *call) Run(ctx context.Context, scope wire.Scope) tools.Result {
	start := time.Now()
	fail := func(we *wire.Error) tools.Result {
		return tools.Timed(tools.Result{Status: wire.StatusError, Backend: scope.Backend,
			Output: wire.ToolOutput{Error: we, Metadata: map[string]any{"backend": scope.Backend}}}, time.Since(start).Milliseconds())
	}
	sess := c.t.up.session()
	if sess == nil {
		return fail(wire.Errorf(wire.CodeBackendUnavailable, "upstream %q is not connected; retry later", c.t.up.spec.Name))
	}
	ctx, cancel := context.WithTimeout(ctx, c.t.up.timeout())
	defer cancel()
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: c.t.def.Name, Arguments: c.raw})
	if err != nil {
		return fail(c.t.up.callError(ctx, err))
	}
	data := map[string]any{"content": res.Content, "structuredContent": res.StructuredContent, "isError": res.IsError}
	if res.Content == nil {
		data["content"] = []mcp.Content{}
	}
	b, err := json.Marshal(data)
	if err != nil {
		return fail(wire.Wrap(wire.CodeToolError, "upstream: encode", err, "the result of %s could not be encoded", c.t.name))
	}
	// A server that echoes its environment or headers (get-env) would
	// hand the injected secrets to the agent, and through the results
	// store to evidence: their values are masked.
	b = []byte(c.t.up.m.redact(string(b)))
	if len(b) > maxResultBytes {
		return fail(wire.Errorf(wire.CodeTooLarge, "the result of %s is %d bytes, over the gateway's %d", c.t.name, len(b), maxResultBytes))
	}
	var out any
	_ = json.Unmarshal(b, &out)
	sum := sha256.Sum256(b)
	r := tools.Result{Status: wire.StatusSucceeded, Backend: scope.Backend, OutputSHA256: hex.EncodeToString(sum[:]),
		Output: wire.ToolOutput{Success: true, Data: out, Metadata: map[string]any{"backend": scope.Backend}}}
	if res.IsError {
		r.Status = wire.StatusFailed
		r.Output.Success = false
		r.Output.Error = &wire.Error{Code: wire.CodeToolError, Message: c.t.name + " answered isError; data.content says why", Details: map[string]any{}}
	}
	return tools.Timed(r, time.Since(start).Milliseconds())
}

// callError maps a failed tools/call: the deadline is timeout, a protocol
// error the server answered is tool_error (its message is the server's,
// shown as is), anything else means the upstream is unreachable.
func (up *conn) callError(ctx context.Context, err error) *wire.Error {
	if ctx.Err() == context.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded) {
		return wire.Wrap(wire.CodeTimeout, "upstream: call", err, "upstream %q did not answer within %s", up.spec.Name, up.timeout())
	}
	if ctx.Err() != nil {
		// The caller went away (or the gateway is shutting down): the
		// session is fine, and a client must not be able to make the
		// gateway drop it (and restart the server) by disconnecting.
		return wire.Wrap(wire.CodeBackendUnavailable, "upstream: call", err, "the call to upstream %q was stopped because the request was cancelled or the gateway is shutting down", up.spec.Name)
	}
	if up.tooLarge.Load() || errors.Is(err, errMessageTooLarge) {
		up.lost(err)
		return wire.Wrap(wire.CodeBackendUnavailable, "upstream: call", err,
			"upstream %q sent a message over the gateway's %d-byte cap; its session was dropped and is being re-established", up.spec.Name, maxMessageBytes)
	}
	var je *jsonrpc.Error
	if errors.As(err, &je) {
		return wire.Wrap(wire.CodeToolError, "upstream: call", err, "upstream %q refused the call: %s", up.spec.Name, truncate(je.Message, 500))
	}
	up.lost(err)
	return wire.Wrap(wire.CodeBackendUnavailable, "upstream: call", err, "upstream %q is unavailable; retry later", up.spec.Name)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
