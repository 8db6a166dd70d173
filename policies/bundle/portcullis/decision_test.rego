package portcullis.tests

import data.portcullis

_agent := {"id": "agent-alpha", "roles": ["agent"], "attributes": {}}

_exec(argv, base) := {
	"principal": _agent,
	"tool": "Exec",
	"purpose": "call",
	"args": {"argv": argv},
	"resolved": {"argv0": argv[0], "argv0_base": base, "argv": argv, "cwd": "", "env_names": []},
	"time": "2026-11-22T10:00:00Z",
}

test_agent_echo_allowed_with_safe_defaults if {
	d := portcullis.decision with input as _exec(["/usr/bin/echo", "hi"], "echo")
	d.allow == true
	d.reasons == []
	d.fs_grants == [{"path": "/usr", "mode": "r"}]
	d.network == {"posture": "off", "allow": []}
	d.env == {"pass": [], "set": {}}
	d.limits.timeout_s == 60
	d.limits.max_output_bytes == 262144
}

test_unknown_principal_without_role_denied if {
	inp := object.union(_exec(["/usr/bin/echo", "hi"], "echo"), {"principal": {"id": "stranger", "roles": [], "attributes": {}}})
	d := portcullis.decision with input as inp
	d.allow == false
	d.reasons == ["tool Exec not granted to stranger"]
}

test_missing_principal_denied if {
	inp := json.remove(_exec(["/usr/bin/echo", "hi"], "echo"), ["principal"])
	d := portcullis.decision with input as inp
	d.allow == false
	"tool Exec not granted to <unknown principal>" in d.reasons
}

test_auditor_and_admin_get_no_tools if {
	every role in ["auditor", "admin"] {
		inp := object.union(_exec(["/usr/bin/echo", "hi"], "echo"), {"principal": {"id": "p", "roles": [role]}})
		d := portcullis.decision with input as inp
		d.allow == false
		d.reasons == ["tool Exec not granted to p"]
	}
}

test_ungranted_tool_denied if {
	inp := object.union(_exec(["/usr/bin/echo", "hi"], "echo"), {"tool": "fs.write"})
	d := portcullis.decision with input as inp
	d.allow == false
	d.reasons == ["tool fs.write not granted to agent-alpha"]
}

test_unknown_purpose_denied if {
	inp := object.union(_exec(["/usr/bin/echo", "hi"], "echo"), {"purpose": "sneak"})
	d := portcullis.decision with input as inp
	d.allow == false
	d.reasons == ["unknown purpose sneak: want call, dry_run, list or launch"]
	no_purpose := json.remove(inp, ["purpose"])
	m := portcullis.decision with input as no_purpose
	m.allow == false
	m.reasons == ["unknown purpose <none>: want call, dry_run, list or launch"]
}

test_list_allows_exactly_granted_tools if {
	every tool in ["Exec", "read_tool_result"] {
		d := portcullis.decision with input as {"principal": _agent, "tool": tool, "purpose": "list", "args": {}, "resolved": {}}
		d == {"allow": true, "reasons": [], "rule_ids": [sprintf("grant:role/agent/%s", [tool])]}
	}
	every tool in ["fs.read", "fs.list", "fs.search", "fs.write", "fs.apply_patch", "code.run", "http.get"] {
		d := portcullis.decision with input as {"principal": _agent, "tool": tool, "purpose": "list", "args": {}, "resolved": {}}
		d.allow == false
	}
}

test_list_ignores_argv_shape if {
	# a list request has no args; it must not be judged as an Exec call
	d := portcullis.decision with input as {"principal": _agent, "tool": "Exec", "purpose": "list", "args": {}, "resolved": {}}
	d.allow == true
}

test_dry_run_judged_like_call if {
	inp := object.union(_exec(["/usr/bin/bash", "-c", "id"], "bash"), {"purpose": "dry_run"})
	d := portcullis.decision with input as inp
	d.allow == false
}

test_granted_tools_generic if {
	cfg := {"roles": {"agent": {"tools": {"fs.read": {"fs": [{"path": "/srv/work", "mode": "r", "alias": "@project"}]}, "http.get": {"network": {"posture": "allowlist", "allow": ["api.github.com:443"]}}}}}}
	d1 := portcullis.decision with input as {"principal": _agent, "tool": "fs.read", "purpose": "call", "args": {"path": "@project/a"}, "resolved": {}}
		with data.portcullis.config as cfg
	d1.allow == true
	d1.fs_grants == [{"path": "/srv/work", "mode": "r", "alias": "@project"}]
	d1.network.posture == "off"
	d2 := portcullis.decision with input as {"principal": _agent, "tool": "http.get", "purpose": "call", "args": {}, "resolved": {}}
		with data.portcullis.config as cfg
	d2.allow == true
	d2.network == {"posture": "allowlist", "allow": ["api.github.com:443"]}
	d2.fs_grants == []
	d3 := portcullis.decision with input as {"principal": _agent, "tool": "Exec", "purpose": "list", "args": {}, "resolved": {}}
		with data.portcullis.config as cfg
	d3.allow == false
}

test_principal_override_merges_over_role if {
	principals := {"agent-alpha": {"tools": {"Exec": {
		"profile": "full",
		"fs_add": [{"path": "/srv/work", "mode": "rw", "alias": "@project"}],
		"limits": {"timeout_s": 300},
		"env": {"pass": ["GOFLAGS"]},
	}}}}
	d := portcullis.decision with input as _exec(["/srv/work/build.sh", "all"], "build.sh")
		with data.portcullis.config.principals as principals
	d.allow == true
	d.fs_grants == [{"path": "/usr", "mode": "r"}, {"path": "/srv/work", "mode": "rw", "alias": "@project"}]
	d.limits.timeout_s == 300
	d.limits.max_output_bytes == 262144 # role/default limits kept key by key
	not d.limits.cpu_seconds # unset: the gateway takes the call's timeout
	d.env.pass == ["GOFLAGS"]
}

test_allow_autorun_passes_through if {
	principals := {"agent-alpha": {"tools": {"fs.write": {"fs": [
		{"path": "/srv/dotfiles", "mode": "rw", "alias": "@dots", "allow_autorun": true},
		{"path": "/srv/work", "mode": "rw", "alias": "@project"},
	]}}}}
	d := portcullis.decision with input as {"principal": _agent, "tool": "fs.write", "purpose": "call", "args": {}, "resolved": {}}
		with data.portcullis.config.principals as principals
	d.allow == true
	d.fs_grants == [
		{"path": "/srv/dotfiles", "mode": "rw", "alias": "@dots", "allow_autorun": true},
		{"path": "/srv/work", "mode": "rw", "alias": "@project"},
	]
}

test_principal_override_replaces_fs if {
	principals := {"agent-alpha": {"tools": {"Exec": {"fs": [{"path": "/opt/tools", "mode": "r"}]}}}}
	d := portcullis.decision with input as _exec(["/usr/bin/echo", "x"], "echo")
		with data.portcullis.config.principals as principals
	d.fs_grants == [{"path": "/opt/tools", "mode": "r"}]
}

test_principal_without_role_gets_own_grants if {
	principals := {"ci-bot": {"tools": {"fs.read": {"fs": [{"path": "/srv/ci", "mode": "r"}]}}}}
	d := portcullis.decision with input as {"principal": {"id": "ci-bot", "roles": []}, "tool": "fs.read", "purpose": "call", "args": {}, "resolved": {}}
		with data.portcullis.config.principals as principals
	d.allow == true
	d.fs_grants == [{"path": "/srv/ci", "mode": "r"}]
}

test_principal_revoke if {
	principals := {"agent-alpha": {"revoke": ["Exec"]}}
	d := portcullis.decision with input as _exec(["/usr/bin/echo", "x"], "echo")
		with data.portcullis.config.principals as principals
	d.allow == false
	d.reasons == ["tool Exec not granted to agent-alpha"]
	l := portcullis.decision with input as {"principal": _agent, "tool": "Exec", "purpose": "list", "args": {}, "resolved": {}}
		with data.portcullis.config.principals as principals
	l.allow == false
}

test_first_role_wins if {
	roles := {
		"agent": {"tools": {"Exec": {"profile": "passive", "fs": [{"path": "/usr", "mode": "r"}]}}},
		"builder": {"tools": {"Exec": {"profile": "full", "fs": [{"path": "/srv", "mode": "rw"}]}}},
	}
	inp := object.union(_exec(["/usr/bin/bash", "-c", "id"], "bash"), {"principal": {"id": "b", "roles": ["builder", "agent"]}})
	d := portcullis.decision with input as inp with data.portcullis.config.roles as roles
	d.allow == true
	d.fs_grants == [{"path": "/srv", "mode": "rw"}]
	inp2 := object.union(inp, {"principal": {"id": "b", "roles": ["agent", "builder"]}})
	d2 := portcullis.decision with input as inp2 with data.portcullis.config.roles as roles
	d2.allow == false
}

test_malformed_grant_denied if {
	roles := {"agent": {"tools": {"Exec": {"profile": "passive", "fs": "/usr", "limits": 5}}}}
	d := portcullis.decision with input as _exec(["/usr/bin/echo", "x"], "echo") with data.portcullis.config.roles as roles
	d.allow == false
	"grant for Exec is malformed: fs must be an array" in d.reasons
	"grant for Exec is malformed: limits must be an object" in d.reasons
}

test_ill_typed_grant_entry_not_a_grant if {
	roles := {"agent": {"tools": {"Exec": true}}}
	d := portcullis.decision with input as _exec(["/usr/bin/echo", "x"], "echo") with data.portcullis.config.roles as roles
	d.allow == false
	d.reasons == ["tool Exec not granted to agent-alpha"]
}

test_missing_config_denies if {
	d := portcullis.decision with input as _exec(["/usr/bin/echo", "x"], "echo") with data.portcullis.config as {}
	d.allow == false
}

test_granted_tools_listing if {
	portcullis.grants.granted_tools == {"Exec", "read_tool_result"} with input as {"principal": _agent}
	portcullis.grants.granted_tools == set() with input as {"principal": {"id": "x", "roles": ["auditor"]}}
}

# The decision takes a fast path (_fast) when no deny rule can refuse the
# call; it must agree with full_decision, which evaluates every deny rule.
_agrees(inp) if not portcullis._fast with input as inp

_agrees(inp) if {
	f := portcullis._fast with input as inp
	f == portcullis.full_decision with input as inp
}

_fast_inputs := [
	_exec(["/usr/bin/echo", "hi"], "echo"),
	_exec(["/usr/bin/git", "status"], "git"),
	_exec(["/usr/bin/git", "log", "--oneline", "-n", "5"], "git"),
	_exec(["/usr/bin/git", "diff", "--no-ext-diff", "--no-textconv"], "git"),
	_exec(["/usr/local/go/bin/go", "vet", "./..."], "go"),
	_exec(["/usr/bin/ls"], "ls"),
	object.union(_exec(["/usr/bin/ls"], "ls"), {"purpose": "dry_run"}),
	{"principal": _agent, "tool": "Exec", "purpose": "list", "args": {}, "resolved": {}},
]

_other_inputs := [
	_exec(["/usr/bin/bash", "--version"], "bash"),
	_exec(["/usr/bin/rm", "-rf", "/"], "rm"),
	_exec(["/usr/bin/bash", "-c", "id"], "bash"),
	_exec(["/usr/bin/git", "diff"], "git"),
	_exec(["/usr/bin/python3.11", "-m", "py_compile", "a.py"], "python3.11"),
	_exec(["/usr/bin/python3.11", "-c", "x"], "python3.11"),
	_exec(["/srv/work/echo", "hi"], "echo"),
	_exec(["/usr/bin/echo", ""], "echo"),
	_exec(["/usr/bin/echo", "hi"], ""),
	object.union(_exec(["/usr/bin/echo", "hi"], "echo"), {"args": {"env": {"CI": "1"}}, "resolved": {"env_names": ["CI"]}}),
	object.union(_exec(["/usr/bin/echo", "hi"], "echo"), {"args": {"env": {}}}),
	object.union(_exec(["/usr/bin/echo", "hi"], "echo"), {"args": {"env": null}}),
	object.union(_exec(["/usr/bin/echo", "hi"], "echo"), {"resolved": {"env_names": ["X"]}}),
	object.union(_exec(["/usr/bin/echo", "hi"], "echo"), {"purpose": "sneak"}),
	object.union(_exec(["/usr/bin/echo", "hi"], "echo"), {"tool": "fs.read"}),
	object.union(_exec(["/usr/bin/echo", "hi"], "echo"), {"principal": {"id": "x", "roles": []}}),
	json.remove(_exec(["/usr/bin/echo", "hi"], "echo"), ["resolved/argv0"]),
	json.remove(_exec(["/usr/bin/echo", "hi"], "echo"), ["args"]),
	{"principal": _agent, "tool": "fs.read", "purpose": "list", "args": {}, "resolved": {}},
]

test_fast_path_agrees_with_full_decision if {
	every inp in array.concat(_fast_inputs, _other_inputs) {
		_agrees(inp)
	}
}

test_fast_path_taken_for_common_calls if {
	every inp in _fast_inputs {
		portcullis._fast with input as inp
	}
}

test_fast_path_agrees_under_other_grants if {
	principals := {"agent-alpha": {
		"tools": {"Exec": {"profile": "full", "limits": {"timeout_s": 300}}, "fs.read": {"fs": [{"path": "/srv", "mode": "r"}]}},
		"revoke": ["http.get"],
	}}
	every inp in array.concat(array.concat(_fast_inputs, _other_inputs), [
		object.union(_exec(["/usr/bin/echo", "hi"], "echo"), {"tool": "http.get"}),
		object.union(_exec(["/usr/bin/make", "all"], "make"), {"args": {"env": {"CI": "1"}}, "resolved": {"env_names": ["CI"]}}),
		object.union(_exec(["/usr/bin/make", "all"], "make"), {"args": {"env": {"LD_PRELOAD": "x"}}, "resolved": {"env_names": ["LD_PRELOAD"]}}),
	]) {
		_agrees(inp) with data.portcullis.config.principals as principals
	}
	portcullis._fast with input as _exec(["/srv/work/build.sh"], "build.sh") with data.portcullis.config.principals as principals
}

test_fast_path_agrees_on_malformed_grants if {
	roles := {"agent": {"tools": {"Exec": {"profile": "passive", "fs": "/usr", "limits": 5}, "fs.read": {"network": 1}}}}
	every inp in array.concat(_fast_inputs, _other_inputs) {
		_agrees(inp) with data.portcullis.config.roles as roles
	}
}

# Rule ids: every decision names the rules behind it.

test_rule_ids_of_allowed_exec_name_grant_and_shape if {
	d := portcullis.decision with input as _exec(["/usr/bin/git", "log", "--oneline", "-n", "5"], "git")
	d.allow == true
	d.rule_ids == ["grant:role/agent/Exec", "exec.shape.git.log"]
	v := portcullis.decision with input as _exec(["/usr/bin/git", "--version"], "git")
	v.rule_ids == ["grant:role/agent/Exec", "exec.shape.git.--version"]
	f := portcullis.full_decision with input as _exec(["/usr/bin/git", "log", "--oneline", "-n", "5"], "git")
	f.rule_ids == d.rule_ids
}

test_rule_ids_of_any_argv_allow if {
	principals := {"agent-alpha": {"tools": {"Exec": {"profile": "full"}}}}
	d := portcullis.decision with input as _exec(["/srv/work/build.sh"], "build.sh") with data.portcullis.config.principals as principals
	d.allow == true
	d.rule_ids == ["grant:role/agent/Exec", "grant:principal/agent-alpha/Exec", "exec.any_argv"]
}

test_rule_ids_of_principal_grant_are_sanitized if {
	principals := {"ops bot@example": {"tools": {"Exec": {"profile": "passive", "fs": [{"path": "/usr", "mode": "r"}]}}}}
	inp := object.union(_exec(["/usr/bin/ls"], "ls"), {"principal": {"id": "ops bot@example", "roles": []}})
	d := portcullis.decision with input as inp with data.portcullis.config.principals as principals
	d.allow == true
	d.rule_ids == ["grant:principal/ops_bot_example/Exec", "exec.shape.ls"]
}

test_rule_ids_of_explicit_shape_id if {
	profiles := {"passive": {"argv0_dirs": ["/usr/bin"], "programs": {"git": [{"id": "ops.git_status", "prefix": ["status"], "max_rest": 0}]}}}
	d := portcullis.decision with input as _exec(["/usr/bin/git", "status"], "git") with data.portcullis.config.exec.profiles as profiles
	d.allow == true
	d.rule_ids == ["grant:role/agent/Exec", "ops.git_status"]
}

test_rule_ids_of_denials if {
	cases := [
		[object.union(_exec(["/usr/bin/echo", "hi"], "echo"), {"principal": {"id": "x", "roles": []}}), ["grants.no_grant"]],
		[object.union(_exec(["/usr/bin/echo", "hi"], "echo"), {"purpose": "sneak"}), ["decision.unknown_purpose"]],
		[_exec(["/usr/bin/rm", "-rf", "/"], "rm"), ["exec.shape_mismatch"]],
		[_exec(["/srv/work/echo", "hi"], "echo"), ["exec.argv0_dir"]],
		[_exec(["/usr/bin/echo", ""], "echo"), ["exec.argv_invalid"]],
		[json.remove(_exec(["/usr/bin/echo", "hi"], "echo"), ["resolved/argv0"]), ["exec.unresolved"]],
		[object.union(_exec(["/usr/bin/echo", "hi"], "echo"), {"args": {"env": {"LD_PRELOAD": "x"}}, "resolved": {"env_names": ["LD_PRELOAD"]}}), ["exec.caller_env", "exec.env_deny"]],
		[object.union(_exec(["/usr/bin/echo", "hi"], "echo"), {"args": {"env": "x"}}), ["exec.env_invalid"]],
	]
	every c in cases {
		d := portcullis.decision with input as c[0]
		d.allow == false
		d.rule_ids == c[1]
	}
}

test_rule_ids_of_malformed_grant_and_unknown_profile if {
	roles := {"agent": {"tools": {"Exec": {"profile": "nope", "limits": 5}}}}
	d := portcullis.decision with input as _exec(["/usr/bin/echo", "hi"], "echo") with data.portcullis.config.roles as roles
	d.allow == false
	d.rule_ids == ["exec.unknown_profile", "grants.malformed"]
	r2 := {"agent": {"tools": {"Exec": {"profile": "nope"}}}}
	u := portcullis.decision with input as _exec(["/usr/bin/echo", "hi"], "echo") with data.portcullis.config.roles as r2
	u.allow == false
	"exec.unknown_profile" in u.rule_ids
}

test_every_denial_names_a_rule if {
	every inp in _other_inputs {
		d := portcullis.full_decision with input as inp
		count(d.rule_ids) > 0
		every id in d.rule_ids {
			regex.match(`^[A-Za-z0-9_.:/-]{1,128}$`, id)
		}
	}
}

# read_tool_result reads back the caller's own earlier result (the gateway
# answers only the principal and session that made the call): the agent
# role has it, with no file system and no network; other roles do not.
test_read_tool_result_agent_only if {
	inp := {
		"principal": _agent, "tool": "read_tool_result", "purpose": "call",
		"args": {"receipt_id": "01a20313-28e8-7b79-9035-d239511fbe58"},
		"resolved": {"receipt_id": "01a20313-28e8-7b79-9035-d239511fbe58"},
	}
	d := portcullis.decision with input as inp
	d.allow == true
	d.fs_grants == []
	d.network == {"posture": "off", "allow": []}
	d.rule_ids == ["grant:role/agent/read_tool_result"]
	full := portcullis.full_decision with input as inp
	full.allow == true
	every role in ["auditor", "admin", "approver"] {
		r := portcullis.decision with input as object.union(inp, {"principal": {"id": "x", "roles": [role]}})
		r.allow == false
	}
	revoked := portcullis.decision with input as inp
		with data.portcullis.config.principals as {"agent-alpha": {"revoke": ["read_tool_result"]}}
	revoked.allow == false
}
