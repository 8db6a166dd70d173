// Package coderun is the code.run tool: TypeScript or JavaScript run by
// Deno with every Deno permission narrowed to the decision (read and write
// only the granted paths, network only the allowlist, no subprocesses,
// environment, FFI, system information or imports from anywhere), inside
// the gateway's OS sandbox (bubblewrap) when it has one, so that Deno's own
// weak spots (symlinks followed out of an allowed path, DNS of allowed
// names) are contained by mounts and a network namespace.
//
// The code reaches other tools only through a bridge: `await
// tools.fs.read({...})` (typed stubs for the tools the caller may call,
// tools/coderun/tsdecl) or `await tools.call("fs.read", {...})` sends a JSON line over a pair of named pipes (FIFOs) made for
// this run, and the gateway runs it through the whole pipeline with
// tools.DispatcherFrom, so each nested call is decided by policy and
// recorded with parent_receipt_id set to the code.run receipt.
package coderun

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/portcullis/portcullis/backends"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/tools/internal/inputschema"
)

// ToolName is the wire name of the tool.
const ToolName = "code.run"

// Options configure the tool.
type Options struct {
	// Runner runs Deno: the gateway's Exec runner (bwrap where it works).
	// Required.
	Runner backends.Runner
	// Deno is the absolute path of the deno binary; empty means code.run
	// answers backend_unavailable.
	Deno string
	// MaxCodeBytes bounds the code. Default 50 KiB.
	MaxCodeBytes int
	// MaxToolCalls bounds the bridge calls of one run. Default 50.
	MaxToolCalls int
	// Logger receives run summaries, never code or output. Default
	// slog.Default().
	Logger *slog.Logger
}

// Defaults.
const (
	DefaultMaxCodeBytes = 50 << 10
	DefaultMaxToolCalls = 50
)

// Tool is the code.run tool. It is safe for concurrent use.
type Tool struct {
	runner   backends.Runner
	deno     string
	maxCode  int
	maxCalls int
	log      *slog.Logger
}

var _ tools.Tool = (*Tool)(nil)

// New returns the tool. It panics without a Runner: a wiring error.
func New(opts Options) *Tool {
	if opts.Runner == nil {
		panic("coderun: Options.Runner is required")
	}
	t := &Tool{runner: opts.Runner, deno: opts.Deno, maxCode: opts.MaxCodeBytes, maxCalls: opts.MaxToolCalls, log: opts.Logger}
	if t.maxCode <= 0 {
		t.maxCode = DefaultMaxCodeBytes
	}
	if t.maxCalls <= 0 {
		t.maxCalls = DefaultMaxToolCalls
	}
	if t.log == nil {
		t.log = slog.Default()
	}
	return t
}

// Name is the wire name "code.run".
func (t *Tool) Name() string { return ToolName }

// Annotations: code can write in its grants and call other tools.
func (t *Tool) Annotations() map[string]any { return tools.Hints(false, true, false, true) }

// Description tells a model how to call the tool correctly the first time.
func (t *Tool) Description() string {
	return "Run TypeScript or JavaScript in a Deno sandbox. The code may read and write only the granted directories, " +
		"reach only the allowed hosts, and cannot run programs or read the environment. " +
		"Call other tools with typed stubs, `await tools.fs.read({path: \"...\"})` (one per tool you may call; " +
		"GET /v1/tools.d.ts has their TypeScript declarations), or `await tools.call(\"fs.read\", {path: \"...\"})`; both resolve to " +
		"{success, data, error, metadata, receipt_id}, and each call is checked by policy like a direct one. " +
		fmt.Sprintf("At most %d tool calls per run, and output (stdout, stderr, result) within max_output_bytes: past either the run is stopped and fails with too_large. ", t.maxCalls) +
		"Export `result` (export const result = ...) to return a JSON value. " +
		"Returns output (console.log), stderr, result, tool_calls, exit_code, exception (message and line) and duration_ms."
}

const parametersSchema = `{
  "type": "object",
  "properties": {
    "code": {
      "type": "string",
      "description": "The program: an ES module. Use await tools.call(name, input) for other tools; export const result = <JSON value> to return a value.",
      "minLength": 1
    },
    "language": {
      "type": "string",
      "enum": ["typescript", "javascript"],
      "description": "Default typescript (types are stripped, not checked)."
    },
    "timeout_s": {
      "type": "integer",
      "description": "Wall-clock timeout in seconds (1-600, default 30). The policy may lower it.",
      "minimum": 1,
      "maximum": 600
    },
    "max_output_bytes": {
      "type": "integer",
      "description": "Cap for console output (each of stdout and stderr) and for the result, in bytes (1024-4194304, default 262144).",
      "minimum": 1024,
      "maximum": 4194304
    }
  },
  "required": ["code"],
  "additionalProperties": false
}`

// Parameters is the JSON Schema of the input.
func (t *Tool) Parameters() json.RawMessage { return schema.JSON() }

// schema is parametersSchema, advertised and enforced (inputschema).
var schema = inputschema.MustCompile("code.run", parametersSchema)

// Prepare validates the input; oversize code is refused here, before
// anything starts.
func (t *Tool) Prepare(ctx context.Context, input json.RawMessage) (tools.Call, error) {
	in, err := decodeInput(input, t.maxCode)
	if err != nil {
		return nil, err
	}
	return &call{tool: t, in: in}, nil
}
