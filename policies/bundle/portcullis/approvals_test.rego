package portcullis.approvals_test

import data.portcullis

_prod_agent := {"id": "agent-alpha", "roles": ["agent"], "attributes": {"environment": "prod"}}

_exec(principal, argv, base) := {
	"principal": principal,
	"tool": "Exec",
	"purpose": "call",
	"args": {"argv": argv},
	"resolved": {"argv0": argv[0], "argv0_base": base, "argv": argv, "cwd": "", "env_names": []},
	"time": "2026-11-22T10:00:00Z",
}

test_prod_exec_outside_allowlist_needs_approval if {
	d := portcullis.decision with input as _exec(_prod_agent, ["/usr/local/go/bin/go", "vet", "./..."], "go")
	d.allow == true
	d.approval.required == true
	d.approval.approvers == ["role:approver"]
	d.approval.ttl_s == 900
	contains(d.approval.reason, "go")
	"approvals.prod_exec" in d.rule_ids
}

test_prod_exec_readonly_runs_without_approval if {
	d := portcullis.decision with input as _exec(_prod_agent, ["/usr/bin/echo", "hi"], "echo")
	d.allow == true
	not d.approval
}

test_prod_git_status_is_readonly_but_git_push_is_not if {
	not portcullis.approvals.required with input as _exec(_prod_agent, ["/usr/bin/git", "status"], "git")
	portcullis.approvals.required with input as _exec(_prod_agent, ["/usr/bin/git", "push"], "git")
}

test_non_prod_exec_needs_no_approval if {
	dev := {"id": "agent-alpha", "roles": ["agent"], "attributes": {"environment": "dev"}}
	d := portcullis.decision with input as _exec(dev, ["/usr/local/go/bin/go", "vet", "./..."], "go")
	not d.approval
	none := {"id": "agent-alpha", "roles": ["agent"], "attributes": {}}
	d2 := portcullis.decision with input as _exec(none, ["/usr/local/go/bin/go", "vet", "./..."], "go")
	not d2.approval
}

test_denied_call_is_denied_not_parked if {
	stranger := {"id": "stranger", "roles": [], "attributes": {"environment": "prod"}}
	d := portcullis.decision with input as _exec(stranger, ["/usr/local/go/bin/go", "vet", "./..."], "go")
	d.allow == false
	not d.approval
}

test_list_purpose_never_needs_approval if {
	inp := object.union(_exec(_prod_agent, ["/usr/local/go/bin/go"], "go"), {"purpose": "list", "args": {}, "resolved": {}})
	d := portcullis.decision with input as inp
	not d.approval
}

test_allowlist_and_ttl_are_data if {
	cfg := {"readonly_programs": ["go"], "ttl_s": 60}
	not portcullis.approvals.required with input as _exec(_prod_agent, ["/usr/local/go/bin/go", "vet", "./..."], "go")
		with data.portcullis.config.approvals as cfg
	r := portcullis.approvals.requirement with input as _exec(_prod_agent, ["/usr/bin/cat", "/etc/hostname"], "cat")
		with data.portcullis.config.approvals as cfg
	r.ttl_s == 60
}

_agent := {"id": "agent-alpha", "roles": ["agent"], "attributes": {}}

test_quotas_from_data if {
	q := [
		{"tool": "Exec", "limit": 100, "window_s": 3600},
		{"tool": "*", "limit": 1000, "window_s": 86400, "cost": 2},
		{"tool": "fs.read", "limit": 1, "window_s": 1},
	]
	d := portcullis.decision with input as _exec(_agent, ["/usr/bin/echo", "hi"], "echo")
		with data.portcullis.config.quotas as q
	d.allow == true
	d.quotas == [
		{"key": "agent-alpha/Exec", "limit": 100, "window_s": 3600, "cost": 1},
		{"key": "agent-alpha/*", "limit": 1000, "window_s": 86400, "cost": 2},
	]
}

test_no_quotas_by_default if {
	d := portcullis.decision with input as _exec(_agent, ["/usr/bin/echo", "hi"], "echo")
	not d.quotas
}

test_denied_call_carries_no_quotas if {
	stranger := {"id": "stranger", "roles": [], "attributes": {}}
	d := portcullis.decision with input as _exec(stranger, ["/usr/bin/echo", "hi"], "echo")
		with data.portcullis.config.quotas as [{"tool": "*", "limit": 1, "window_s": 1}]
	d.allow == false
	not d.quotas
}

test_approval_and_quotas_together if {
	d := portcullis.decision with input as _exec(_prod_agent, ["/usr/local/go/bin/go", "vet", "./..."], "go")
		with data.portcullis.config.quotas as [{"tool": "Exec", "limit": 5, "window_s": 60}]
	d.approval.required == true
	d.quotas == [{"key": "agent-alpha/Exec", "limit": 5, "window_s": 60, "cost": 1}]
}
