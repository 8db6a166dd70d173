# Package portcullis is the policy of the fs end-to-end tests (tests/fs_test.go).
# Data-driven like testdata/policy/e2e.rego, plus one rule on the gateway's
# normalized facts: files named *.key are refused whatever path or alias names
# them, which shows a policy can deny by resolved path.
#
# data.fs.principals[<principal id>] = {"tools": [...], "fs_grants": [...], "limits": {...}}
package portcullis

default decision := {"allow": false, "reasons": ["fs e2e: no grant for this principal and tool"]}

cfg := data.fs.principals[input.principal.id]

key_file if {
	some p in input.resolved.paths
	endswith(p.name, ".key")
}

decision := {
	"allow": true,
	"reasons": [sprintf("fs e2e: %s may call %s", [input.principal.id, input.tool])],
	"fs_grants": object.get(cfg, "fs_grants", []),
	"network": {"posture": "off", "allow": []},
	"limits": object.get(cfg, "limits", {}),
} if {
	input.tool in cfg.tools
	not key_file
}

decision := {"allow": false, "reasons": ["fs e2e: *.key files are off limits"]} if {
	input.tool in cfg.tools
	key_file
}
