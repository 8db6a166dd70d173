package policies

import (
	"reflect"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/wire"
)

func TestParseApprovalAndQuotas(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		src       string
		allow     bool
		approval  *wire.ApprovalRequirement
		quotas    []wire.Quota
		reasonHas string
	}{
		{name: "approval required", src: `{"allow": true, "approval": {"required": true, "reason": "prod", "approvers": ["role:approver", "principal:alice"], "ttl_s": 60}}`,
			allow: true, approval: &wire.ApprovalRequirement{Required: true, Reason: "prod", Approvers: []string{"role:approver", "principal:alice"}, TTLS: 60}},
		{name: "approval defaults", src: `{"allow": true, "approval": {"required": true}}`,
			allow: true, approval: &wire.ApprovalRequirement{Required: true, Approvers: []string{}, TTLS: wire.DefaultApprovalTTLS}},
		{name: "approval not required", src: `{"allow": true, "approval": {"required": false, "ttl_s": 5}}`, allow: true},
		{name: "approval malformed denies", src: `{"allow": true, "approval": {"required": "yes"}}`, reasonHas: "approval is malformed"},
		{name: "approval unknown key denies", src: `{"allow": true, "approval": {"required": true, "approver": ["x"]}}`, reasonHas: "unknown key"},
		{name: "approval bad approver denies", src: `{"allow": true, "approval": {"required": true, "approvers": ["approver"]}}`, reasonHas: "approvers[0]"},
		{name: "approval ttl out of range denies", src: `{"allow": true, "approval": {"required": true, "ttl_s": 0}}`, reasonHas: "ttl_s"},
		{name: "approval not object denies", src: `{"allow": true, "approval": true}`, reasonHas: "not an object"},
		{name: "quota", src: `{"allow": true, "quotas": [{"key": "agent-alpha/Exec", "limit": 100, "window_s": 3600, "cost": 2}]}`,
			allow: true, quotas: []wire.Quota{{Key: "agent-alpha/Exec", Limit: 100, WindowS: 3600, Cost: 2}}},
		{name: "quota cost defaults to 1, limit 0 allowed", src: `{"allow": true, "quotas": [{"key": "k", "limit": 0, "window_s": 1}]}`,
			allow: true, quotas: []wire.Quota{{Key: "k", Limit: 0, WindowS: 1, Cost: 1}}},
		{name: "quota without limit denies", src: `{"allow": true, "quotas": [{"key": "k", "window_s": 1}]}`, reasonHas: "limit is required"},
		{name: "quota negative limit denies", src: `{"allow": true, "quotas": [{"key": "k", "limit": -1, "window_s": 1}]}`, reasonHas: "limit"},
		{name: "quota zero cost denies", src: `{"allow": true, "quotas": [{"key": "k", "limit": 1, "window_s": 1, "cost": 0}]}`, reasonHas: "cost"},
		{name: "quota fractional denies", src: `{"allow": true, "quotas": [{"key": "k", "limit": 1.5, "window_s": 1}]}`, reasonHas: "limit"},
		{name: "quota unknown key denies", src: `{"allow": true, "quotas": [{"key": "k", "limit": 1, "window_s": 1, "burst": 3}]}`, reasonHas: "unknown key"},
		{name: "quotas not array denies", src: `{"allow": true, "quotas": {"key": "k"}}`, reasonHas: "quotas is malformed"},
		{name: "quota key unprintable denies", src: `{"allow": true, "quotas": [{"key": "a\u0000b", "limit": 1, "window_s": 1}]}`, reasonHas: "key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := parseDecision(jsonValue(t, tc.src))
			if d.Allow != tc.allow {
				t.Fatalf("allow = %v, want %v (reasons %q)", d.Allow, tc.allow, d.Reasons)
			}
			if !reflect.DeepEqual(d.Approval, tc.approval) {
				t.Errorf("approval = %+v, want %+v", d.Approval, tc.approval)
			}
			if tc.allow && !reflect.DeepEqual(d.Quotas, tc.quotas) && len(d.Quotas)+len(tc.quotas) > 0 {
				t.Errorf("quotas = %+v, want %+v", d.Quotas, tc.quotas)
			}
			if tc.reasonHas != "" && !strings.Contains(strings.Join(d.Reasons, "; "), tc.reasonHas) {
				t.Errorf("reasons %q do not say %q", d.Reasons, tc.reasonHas)
			}
		})
	}
}
