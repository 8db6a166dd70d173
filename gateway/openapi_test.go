package gateway

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/gateway/ui"
	"github.com/portcullis/portcullis/wire"
)

type openAPIDoc struct {
	OpenAPI    string                                `json:"openapi"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]struct {
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		} `json:"schemas"`
	} `json:"components"`
}

func loadDoc(t *testing.T) openAPIDoc {
	t.Helper()
	var doc openAPIDoc
	if err := json.Unmarshal(OpenAPIDocument, &doc); err != nil {
		t.Fatalf("openapi.json is not JSON: %v", err)
	}
	return doc
}

// TestOpenAPIMatchesRoutes holds the served document against the routes the
// server really registers, both ways.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	doc := loadDoc(t)
	if !strings.HasPrefix(doc.OpenAPI, "3.1.") {
		t.Fatalf("openapi = %q, want 3.1.x", doc.OpenAPI)
	}
	s := New(Options{OpenAPI: OpenAPIDocument})
	var routes, documented []string
	for _, r := range s.Routes() {
		path := r[1]
		// The evidence explorer (gateway/ui) is a static page, not API: it
		// is documented in docs/explorer.md, not in openapi.json.
		if ui.IsRoute(path) {
			continue
		}
		if seg := strings.Split(path, "/"); len(seg) > 0 {
			for i, p := range seg {
				if strings.HasPrefix(p, ":") {
					seg[i] = "{" + p[1:] + "}"
				}
			}
			path = strings.Join(seg, "/")
		}
		routes = append(routes, strings.ToLower(r[0])+" "+path)
	}
	for path, ops := range doc.Paths {
		for method := range ops {
			documented = append(documented, method+" "+path)
		}
	}
	sort.Strings(routes)
	sort.Strings(documented)
	if diff := cmp.Diff(documented, routes); diff != "" {
		t.Errorf("routes and openapi.json differ (-documented +served):\n%s", diff)
	}
}

// TestOpenAPISchemasMatchWire checks every documented schema names exactly
// the JSON fields of its wire type, so SDKs generated from the document and
// the Go types cannot drift.
func TestOpenAPISchemasMatchWire(t *testing.T) {
	t.Parallel()
	doc := loadDoc(t)
	types := map[string]any{
		"Error": wire.Error{}, "ErrorBody": wire.ErrorBody{}, "ToolCallRequest": wire.ToolCallRequest{},
		"ToolOutput": wire.ToolOutput{}, "DecisionResult": wire.DecisionResult{}, "ToolCallResponse": wire.ToolCallResponse{},
		"FSGrant": wire.FSGrant{}, "Network": wire.Network{}, "EnvPolicy": wire.EnvPolicy{}, "Limits": wire.Limits{},
		"Decision": wire.Decision{}, "Scope": wire.Scope{}, "DryRunResponse": wire.DryRunResponse{},
		"Outcome": wire.Outcome{}, "NetworkStats": wire.NetworkStats{}, "Receipt": wire.Receipt{}, "ReceiptList": wire.ReceiptList{},
		"FunctionSpec": wire.FunctionSpec{}, "FunctionTool": wire.FunctionTool{}, "ToolList": wire.ToolList{},
		"ReasonSource": wire.ReasonSource{}, "PolicyStatus": wire.PolicyStatus{}, "PolicyReload": wire.PolicyReload{},
		"ReceiptChain": wire.ReceiptChain{}, "InclusionProof": wire.InclusionProof{}, "ReceiptProof": wire.ReceiptProof{},
		"StatsBucket": wire.StatsBucket{}, "EvidenceStats": wire.EvidenceStats{},
		"HoldRequest": wire.HoldRequest{}, "HoldReleaseRequest": wire.HoldReleaseRequest{}, "Hold": wire.Hold{}, "HoldList": wire.HoldList{},
		"ExecPlan": wire.ExecPlan{}, "ArgInsert": wire.ArgInsert{}, "PathArg": wire.PathArg{},
		"ApprovalRequirement": wire.ApprovalRequirement{}, "Quota": wire.Quota{}, "ApprovalRef": wire.ApprovalRef{},
		"Approval": wire.Approval{}, "ApprovalList": wire.ApprovalList{}, "ApprovalDecision": wire.ApprovalDecision{},
		"ApprovalResult": wire.ApprovalResult{}, "QuotaUsage": wire.QuotaUsage{}, "QuotaList": wire.QuotaList{},
	}
	for name := range doc.Components.Schemas {
		if _, ok := types[name]; !ok {
			t.Errorf("schema %s has no wire type in this test", name)
		}
	}
	for name, v := range types {
		schema, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("wire.%s is not documented in openapi.json", name)
			continue
		}
		var want, got []string
		rt := reflect.TypeOf(v)
		for i := 0; i < rt.NumField(); i++ {
			tag, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			if tag != "" && tag != "-" {
				want = append(want, tag)
			}
		}
		for p := range schema.Properties {
			got = append(got, p)
		}
		sort.Strings(want)
		sort.Strings(got)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("schema %s vs wire.%s fields (-wire +schema):\n%s", name, name, diff)
		}
		for _, r := range schema.Required {
			if _, ok := schema.Properties[r]; !ok {
				t.Errorf("schema %s requires unknown property %q", name, r)
			}
		}
	}
}
