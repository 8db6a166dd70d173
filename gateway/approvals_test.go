package gateway

import (
	"testing"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/wire"
)

// TestMayDecide: nobody decides their own call (whatever roles they
// hold); an admin decides any other; otherwise the policy's approvers
// name who may, by role or principal id, and an empty list means any
// approver.
func TestMayDecide(t *testing.T) {
	t.Parallel()
	pc := func(approvers ...string) evidence.ParkedCall {
		return evidence.ParkedCall{Principal: wire.Principal{ID: "agent-1", Roles: []string{"agent", "approver", "admin"}}, Approvers: approvers}
	}
	p := func(id string, roles ...string) wire.Principal { return wire.Principal{ID: id, Roles: roles} }
	for _, tc := range []struct {
		name string
		who  wire.Principal
		call evidence.ParkedCall
		ok   bool
	}{
		{"own call, even as admin and approver", p("agent-1", "admin", "approver"), pc(), false},
		{"own call under another case", p("Agent-1", "admin", "approver"), pc(), false},
		{"own call in fullwidth letters", p("ａｇｅｎｔ-1", "admin", "approver"), pc(), false},
		{"any approver when none named", p("ap-1", "approver"), pc(), true},
		{"role named", p("ap-1", "approver"), pc("role:approver"), true},
		{"role not held", p("ap-1", "approver"), pc("role:security"), false},
		{"principal named", p("sec-7", "approver"), pc("principal:sec-7"), true},
		{"another principal named", p("sec-8", "approver"), pc("principal:sec-7"), false},
		{"prefix is not a match", p("sec-7x", "approver"), pc("principal:sec-7"), false},
		{"admin always", p("root", "admin"), pc("principal:sec-7"), true},
		{"malformed entries match nothing", p("ap-1", "approver"), pc("role:", "approver", "principal:"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if we := mayDecide(tc.who, tc.call); (we == nil) != tc.ok {
				t.Fatalf("mayDecide = %v, want ok %v", we, tc.ok)
			}
		})
	}
}
