package gateway

import (
	"encoding/json"
	"fmt"
	"testing"
)

// TestOpenAPIForGenerators holds the document to what client generators
// need (scripts/openapi-clients-test.sh runs two of them): a relative
// server, a license, every operation tagged with a declared tag and
// uniquely named, and no schema a generator cannot type (a "type" list
// of several types, or an object of nothing).
func TestOpenAPIForGenerators(t *testing.T) {
	t.Parallel()
	var doc struct {
		Info struct {
			License struct{ Name, Identifier string } `json:"license"`
		} `json:"info"`
		Servers []struct{ URL string }  `json:"servers"`
		Tags    []struct{ Name string } `json:"tags"`
		Paths   map[string]map[string]struct {
			OperationID string   `json:"operationId"`
			Tags        []string `json:"tags"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(OpenAPIDocument, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Info.License.Identifier != "Apache-2.0" {
		t.Errorf("info.license = %+v, want Apache-2.0", doc.Info.License)
	}
	if len(doc.Servers) != 1 || doc.Servers[0].URL != "/" {
		t.Errorf("servers = %+v, want the one relative server /", doc.Servers)
	}
	declared := map[string]bool{}
	for _, tag := range doc.Tags {
		declared[tag.Name] = true
	}
	ids := map[string]string{}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			where := method + " " + path
			if len(op.Tags) == 0 {
				t.Errorf("%s has no tags", where)
			}
			for _, tag := range op.Tags {
				if !declared[tag] {
					t.Errorf("%s: tag %q is not declared in the top-level tags", where, tag)
				}
			}
			if op.OperationID == "" || ids[op.OperationID] != "" {
				t.Errorf("%s: operationId %q missing or also used by %s", where, op.OperationID, ids[op.OperationID])
			}
			ids[op.OperationID] = where
		}
	}
	var raw any
	_ = json.Unmarshal(OpenAPIDocument, &raw)
	walkSchemas(raw, "#", func(at string, s map[string]any) {
		if types, ok := s["type"].([]any); ok {
			nonNull := 0
			for _, ty := range types {
				if ty != "null" {
					nonNull++
				}
			}
			if nonNull > 1 {
				t.Errorf("%s: type %v: generators need oneOf for a value of several types", at, types)
			}
		}
		if s["type"] == "object" && s["properties"] == nil && s["additionalProperties"] == nil && s["oneOf"] == nil && s["allOf"] == nil && s["anyOf"] == nil {
			t.Errorf("%s: an object schema with neither properties nor additionalProperties types as an empty object", at)
		}
	})
}

func walkSchemas(v any, at string, visit func(string, map[string]any)) {
	switch x := v.(type) {
	case map[string]any:
		visit(at, x)
		for k, c := range x {
			walkSchemas(c, at+"/"+k, visit)
		}
	case []any:
		for i, c := range x {
			walkSchemas(c, fmt.Sprintf("%s/%d", at, i), visit)
		}
	}
}
