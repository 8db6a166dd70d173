package policies

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"testing/fstest"
)

// TestSchemaAnnotationRefusesUnknownField: a rule annotated with a tool's
// input schema that reads an argument the tool does not have fails to load.
func TestSchemaAnnotationRefusesUnknownField(t *testing.T) {
	t.Parallel()
	schemas, err := InputSchemas([]ToolSchema{{Name: "Exec", Args: json.RawMessage(`{"type":"object","properties":{"argv":{"type":"array","items":{"type":"string"}}},"additionalProperties":false}`)}})
	if err != nil {
		t.Fatal(err)
	}
	ss, err := SchemaSet(schemas)
	if err != nil {
		t.Fatal(err)
	}
	rule := func(field string) fstest.MapFS {
		return fstest.MapFS{"p.rego": {Data: []byte(`package portcullis

# METADATA
# schemas:
#   - input: schema.tools.Exec
exec_ok if input.args.` + field + `[0] == "/usr/bin/git"

decision := {"allow": exec_ok}
`)}}
	}
	tests := []struct {
		name, field, wantErr string
	}{
		{"known field", "argv", ""},
		{"typo", "argvv", "undefined ref: input.args.argvv"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := NewEngine(Options{})
			_, err := e.LoadWith(context.Background(), rule(tc.field), "test", LoadOptions{Schemas: ss})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("load: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || StageOf(err) != StageCompile {
				t.Fatalf("err = %v (stage %q), want %q at compile", err, StageOf(err), tc.wantErr)
			}
		})
	}
	// The shipped policy type-checks against the envelope schema.
	if _, err := NewEngine(Options{}).LoadWith(context.Background(), Shipped(), "shipped", LoadOptions{Schemas: ss, RunTests: true}); err != nil {
		t.Fatalf("shipped policy with schemas and tests: %v", err)
	}
}
