// Package exectool is the Exec tool: it runs one program from an absolute
// argv, never through a shell and never by a $PATH lookup, with an
// environment built from a fixed base plus what the policy and the caller
// give it, inside the fs grants of the decision, on whichever Runner the
// gateway chose (bubblewrap, or the plain process runner).
//
// It lives in tools/exec; the package is named exectool so that it does not
// shadow os/exec where both are used.
package exectool

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/user"
	"runtime"
	"strconv"

	"github.com/portcullis/portcullis/backends"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/tools/internal/inputschema"
)

// ToolName is the wire name of the tool.
const ToolName = "Exec"

// Options configure the tool.
type Options struct {
	// Runner executes the program. Required.
	Runner backends.Runner
	// Environ is the gateway's own environment, the only source of
	// env.pass values. Default: os.Environ.
	Environ func() []string
	// Logger receives run summaries (argv[0], exit code, never argument
	// or environment values). Default: slog.Default().
	Logger *slog.Logger
}

// Tool is the Exec tool. It is safe for concurrent use.
type Tool struct {
	runner  backends.Runner
	environ func() []string
	log     *slog.Logger
	user    string
	res     *resolver // where argv[0] and cwd lead, remembered (resolve_linux.go)
}

var _ tools.Tool = (*Tool)(nil)

// New returns the Exec tool. It panics if opts.Runner is nil: a gateway
// wired without a runner is a programming error, not a runtime condition.
func New(opts Options) *Tool {
	if opts.Runner == nil {
		panic("exectool: Options.Runner is required")
	}
	t := &Tool{runner: opts.Runner, environ: opts.Environ, log: opts.Logger}
	if t.environ == nil {
		t.environ = os.Environ
	}
	if t.log == nil {
		t.log = slog.Default()
	}
	t.user = currentUser()
	if t.res = newResolver(); t.res != nil {
		runtime.AddCleanup(t, func(r *resolver) { r.close() }, t.res)
	}
	return t
}

// currentUser is the gateway user's name for the child's USER.
func currentUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return strconv.Itoa(os.Getuid())
}

// Name is the wire name "Exec".
func (t *Tool) Name() string { return ToolName }

// Annotations: a program can change anything it is granted, and reach
// whatever the network posture allows.
func (t *Tool) Annotations() map[string]any { return tools.Hints(false, true, false, true) }

// Description tells a model how to call the tool correctly the first time,
// and which argv shapes the shipped passive profile refuses, so that it
// does not learn them one refusal at a time (the Modulatio design lists
// them at lookup). It is the same for every caller: a tool description is
// not decided per principal.
func (t *Tool) Description() string {
	return "Run a program directly, without a shell and without a $PATH lookup. " +
		"argv[0] must be the absolute path of an executable file inside the granted directories " +
		"(e.g. [\"/usr/bin/git\", \"status\"]); shell syntax such as pipes, ';' or '$VAR' is passed " +
		"literally. cwd is an optional absolute directory inside the grants; give it and name files " +
		"relative to it. Every file argument must lie inside the grants: paths outside them, through " +
		"symlinks out of them, or naming secrets (.env, keys, credential stores) are refused with fs_denied. " +
		"The program gets a minimal environment plus the optional env object (the policy may refuse env). " +
		"Under the default passive profile only read-only shapes run, e.g. python3 -m py_compile FILE, " +
		"python3 -V, node -v, npm --version, ruby -v, go version, go vet PKG, gofmt -l|-d FILE, " +
		"ruff check PATH, mypy PATH, pyflakes PATH, git status|log|diff --no-ext-diff --no-textconv, " +
		"ls, cat, head, tail, wc, echo. Refused there because they run code from the working tree: " +
		"python3 -c, python3 FILE (even FILE --help), python3 -m MODULE other than py_compile, " +
		"node FILE, node -e, ruby FILE, ruby -c (Ruby honours the file's #! switches), ruby -e, rubocop " +
		"(.rubocop options file), bundle (bundle exec rubocop included), npm other than --version, npx, " +
		"go run|build|test|generate, gofmt -w, ruff format, ruff check --fix, mypy --config-file, git -c " +
		"and other git subcommands. Do not retry a refused shape in another form: report instead. " +
		"Returns exit_code, stdout, stderr (UTF-8, capped at max_output_bytes each, with *_truncated flags), " +
		"timed_out, signal and duration_ms."
}

// parametersSchema is the JSON Schema of the input, OpenAI-function
// compatible: the one source of what the input may look like (inputschema);
// decodeInput adds the rules a schema cannot say.
const parametersSchema = `{
  "type": "object",
  "properties": {
    "argv": {
      "type": "array",
      "description": "Program and arguments. argv[0] is the absolute path of an executable, e.g. /usr/bin/git; no shell, no PATH lookup.",
      "items": {"type": "string", "minLength": 1},
      "minItems": 1,
      "maxItems": 4096
    },
    "cwd": {
      "type": "string",
      "description": "Absolute working directory inside the granted paths. Default: a fresh empty temporary directory."
    },
    "env": {
      "type": "object",
      "description": "Extra environment variables for the program. Names must not be empty, start with '_' or 'LD_', or contain '='. HOME is always a private temporary directory and cannot be set.",
      "additionalProperties": {"type": "string"}
    },
    "timeout_s": {
      "type": "integer",
      "description": "Wall-clock timeout in seconds (1-600, default 60). The policy may lower it.",
      "minimum": 1,
      "maximum": 600
    },
    "max_output_bytes": {
      "type": "integer",
      "description": "Cap for stdout and for stderr, each, in bytes (1024-4194304, default 262144). The policy may lower it.",
      "minimum": 1024,
      "maximum": 4194304
    }
  },
  "required": ["argv"],
  "additionalProperties": false
}`

// Parameters is the JSON Schema of the input, shown to models.
func (t *Tool) Parameters() json.RawMessage { return schema.JSON() }

// schema is parametersSchema, advertised and enforced (inputschema).
var schema = inputschema.MustCompile("Exec", parametersSchema)

// Prepare validates and normalizes input; see input.go for the rules.
func (t *Tool) Prepare(ctx context.Context, input json.RawMessage) (tools.Call, error) {
	in, err := decodeInput(input, t.res)
	if err != nil {
		return nil, err
	}
	return &call{tool: t, in: in}, nil
}
