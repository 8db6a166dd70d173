package tsdecl

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/wire"
)

func spec(name, desc, schema string) wire.FunctionSpec {
	return wire.FunctionSpec{Name: name, Description: desc, Parameters: json.RawMessage(schema)}
}

func TestStubs(t *testing.T) {
	t.Parallel()
	got := Stubs([]wire.FunctionSpec{
		spec("fs.read", "", `{}`), spec("Exec", "", `{}`), spec("http.get", "", `{}`),
		spec("a", "", `{}`), spec("a.b", "", `{}`), // collision: "a" wins
		spec("x.y", "", `{}`), spec("x", "", `{}`), // "x" sorts first: x.y dropped
		spec("call", "", `{}`), spec("__proto__.x", "", `{}`), spec("files.read text", "", `{}`), spec("m.then", "", `{}`),
		spec("files.read_text-file", "", `{}`), spec("fs.read", "", `{}`),
	})
	var names []string
	for _, s := range got {
		names = append(names, s.Name)
	}
	if want := "Exec a files.read_text-file fs.read http.get x"; strings.Join(names, " ") != want {
		t.Errorf("stubs %q, want %q", strings.Join(names, " "), want)
	}
}

func TestDeclarations(t *testing.T) {
	t.Parallel()
	d := Declarations([]wire.FunctionSpec{
		spec("fs.read", "Read a file. */ alert(1) /*", `{"type":"object","properties":{
			"path":{"type":"string","description":"Absolute path"},
			"startLine":{"type":"integer"},
			"mode":{"enum":["a","b"]},
			"tags":{"type":"array","items":{"type":["string","null"]}},
			"opts":{"type":"object","additionalProperties":{"type":"boolean"}}},
			"required":["path"],"additionalProperties":false}`),
		spec("Exec", "Run a program.", `{"type":"object","properties":{"argv":{"type":"array","items":{"type":"string"}}},"required":["argv"]}`),
		spec("files.read-text", "", `not json`),
	})
	for _, want := range []string{
		"interface ToolResult<T = any>",
		"call(tool: string, input?: Record<string, unknown>): Promise<ToolResult>;",
		"  fs: {\n",
		"read(input: {\n",
		"path: string;",
		"startLine?: number;",
		`mode?: "a" | "b";`,
		"tags?: (string | null)[];",
		"opts?: Record<string, boolean>;",
		"/** Absolute path */",
		"Exec(input: {\n",
		"argv: string[];",
		`"read-text"(input: Record<string, unknown>): Promise<ToolResult>;`,
	} {
		if !strings.Contains(d, want) {
			t.Errorf("declarations lack %q:\n%s", want, d)
		}
	}
	// A description cannot end its comment early.
	if strings.Contains(d, "*/ alert") {
		t.Errorf("description escaped its comment:\n%s", d)
	}
	// Deep or cyclic-looking schemas are cut, not followed forever.
	deep := `{"type":"object","properties":{"a":` + strings.Repeat(`{"type":"array","items":`, 50) + `{"type":"string"}` + strings.Repeat("}", 50) + `}}`
	if d := Declarations([]wire.FunctionSpec{spec("deep", "", deep)}); !strings.Contains(d, "unknown") {
		t.Errorf("deep schema not cut:\n%s", d)
	}
}

func TestStubsJS(t *testing.T) {
	t.Parallel()
	js := string(StubsJS(Stubs([]wire.FunctionSpec{spec("fs.read", "", `{}`), spec("Exec", "", `{}`)})))
	if js != "import { install } from \"./bridge.js\";\ninstall([\"Exec\",\"fs.read\"]);\n" {
		t.Errorf("%q", js)
	}
	if js := string(StubsJS(nil)); !strings.Contains(js, "install([])") {
		t.Errorf("%q", js)
	}
}
