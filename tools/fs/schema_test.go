package fstool

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestSchemasGolden keeps the tools' names, descriptions and JSON Schemas
// (what models see in GET /v1/tools) under review in testdata/.
func TestSchemasGolden(t *testing.T) {
	t.Parallel()
	type spec struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	}
	var specs []spec
	for _, tl := range Tools(Options{}) {
		if !json.Valid(tl.Parameters()) {
			t.Fatalf("%s: parameters are not valid JSON", tl.Name())
		}
		specs = append(specs, spec{tl.Name(), tl.Description(), tl.Parameters()})
	}
	got, err := json.MarshalIndent(specs, "", "  ")
	must(t, err)
	golden := filepath.Join("testdata", "schemas.golden.json")
	if *update {
		must(t, os.WriteFile(golden, append(got, '\n'), 0o644))
	}
	want, err := os.ReadFile(golden)
	must(t, err)
	if !bytes.Equal(bytes.TrimSpace(want), bytes.TrimSpace(got)) {
		t.Errorf("schemas differ from %s; run go test -run TestSchemasGolden -update and review the diff", golden)
	}
}

// TestParametersMatchDecoder: every property a schema names is accepted by
// Prepare, and a name it does not list is refused.
func TestParametersMatchDecoder(t *testing.T) {
	t.Parallel()
	for _, tl := range Tools(Options{}) {
		var s struct {
			Properties map[string]json.RawMessage `json:"properties"`
		}
		must(t, json.Unmarshal(tl.Parameters(), &s))
		for name := range s.Properties {
			_, err := tl.Prepare(t.Context(), json.RawMessage(`{"`+name+`":null}`))
			if err != nil && strings.Contains(err.Error(), "unknown field") {
				t.Errorf("%s: schema property %q is refused by Prepare: %v", tl.Name(), name, err)
			}
		}
		_, err := tl.Prepare(t.Context(), json.RawMessage(`{"path":"@w/x","notAField":1}`))
		if err == nil || !strings.Contains(err.Error(), "unknown field") {
			t.Errorf("%s: unknown field accepted: %v", tl.Name(), err)
		}
	}
}
