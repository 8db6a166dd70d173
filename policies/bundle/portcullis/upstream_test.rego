package portcullis.tests

import data.portcullis

_up_agent := {"id": "agent-alpha", "roles": ["agent"], "attributes": {}}

_up_call(tool, upstream, annotations) := {
	"principal": _up_agent,
	"tool": sprintf("%s.%s", [upstream, tool]),
	"purpose": "call",
	"args": {"message": "hi"},
	"resolved": {"upstream": {
		"name": upstream, "tool": tool, "transport": "stdio",
		"definition_sha256": "00", "annotations": annotations,
	}},
	"time": "2026-11-22T10:00:00Z",
}

_up_roles := {
	"agent": {"tools": {"every.echo": {}, "every.add": {}}},
	"upstream": {"tools": {"every": {"fs": [{"path": "/opt/mcp", "mode": "r"}], "network": {"posture": "off"}}}},
}

test_upstream_tool_granted_by_name if {
	d := portcullis.decision with input as _up_call("echo", "every", {}) with data.portcullis.config.roles as _up_roles
	d.allow == true
	d.rule_ids == ["grant:role/agent/every.echo"]
}

test_upstream_tool_not_granted_denied if {
	d := portcullis.decision with input as _up_call("printEnv", "every", {}) with data.portcullis.config.roles as _up_roles
	d.allow == false
	d.reasons == ["tool every.printEnv not granted to agent-alpha"]
}

test_upstream_tool_listed_only_when_granted if {
	inp := object.union(_up_call("echo", "every", {}), {"purpose": "list", "args": {}})
	d := portcullis.decision with input as inp with data.portcullis.config.roles as _up_roles
	d.allow == true
	inp2 := object.union(_up_call("printEnv", "every", {}), {"purpose": "list", "args": {}})
	d2 := portcullis.decision with input as inp2 with data.portcullis.config.roles as _up_roles
	d2.allow == false
}

test_read_only_upstream_refuses_tools_without_the_hint if {
	d := portcullis.decision with input as _up_call("add", "every", {"readOnlyHint": false})
		with data.portcullis.config.roles as _up_roles
		with data.portcullis.config.upstreams as {"every": {"read_only": true}}
	d.allow == false
	d.rule_ids == ["upstream.read_only"]
}

test_read_only_upstream_hides_tools_without_the_hint if {
	inp := object.union(_up_call("add", "every", {}), {"purpose": "list", "args": {}})
	d := portcullis.decision with input as inp
		with data.portcullis.config.roles as _up_roles
		with data.portcullis.config.upstreams as {"every": {"read_only": true}}
	d.allow == false
}

test_read_only_upstream_allows_hinted_tools if {
	d := portcullis.decision with input as _up_call("echo", "every", {"readOnlyHint": true})
		with data.portcullis.config.roles as _up_roles
		with data.portcullis.config.upstreams as {"every": {"read_only": true}}
	d.allow == true
}

test_launch_gets_the_upstream_roles_grant if {
	inp := {
		"principal": {"id": "upstream:every", "roles": ["upstream"], "attributes": {}},
		"tool": "every", "purpose": "launch", "args": {},
		"resolved": {"upstream": {"name": "every", "transport": "stdio", "command": ["/usr/bin/node"]}},
		"time": "2026-11-22T10:00:00Z",
	}
	d := portcullis.decision with input as inp with data.portcullis.config.roles as _up_roles
	d.allow == true
	d.fs_grants == [{"path": "/opt/mcp", "mode": "r"}]
	d.network.posture == "off"
}

test_launch_without_grant_denied if {
	inp := {
		"principal": {"id": "upstream:other", "roles": ["upstream"], "attributes": {}},
		"tool": "other", "purpose": "launch", "args": {}, "resolved": {},
		"time": "2026-11-22T10:00:00Z",
	}
	d := portcullis.decision with input as inp with data.portcullis.config.roles as _up_roles
	d.allow == false
}

test_agent_cannot_launch if {
	inp := {
		"principal": _up_agent,
		"tool": "every", "purpose": "launch", "args": {}, "resolved": {},
		"time": "2026-11-22T10:00:00Z",
	}
	d := portcullis.decision with input as inp with data.portcullis.config.roles as _up_roles
	d.allow == false
}
