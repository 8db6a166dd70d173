# Package portcullis is the policy of the fs attack end-to-end tests
# (tests/fs_attack_test.go): data-driven, passing each principal's
# fs_grants (allow_autorun included), fs_deny and limits through.
#
# data.fsattack.principals[<principal id>] = {"tools": [...], "fs_grants": [...], "fs_deny": [...]}
package portcullis

default decision := {"allow": false, "reasons": ["fs attack e2e: no grant for this principal and tool"]}

cfg := data.fsattack.principals[input.principal.id]

decision := {
	"allow": true,
	"reasons": [sprintf("fs attack e2e: %s may call %s", [input.principal.id, input.tool])],
	"fs_grants": object.get(cfg, "fs_grants", []),
	"fs_deny": object.get(cfg, "fs_deny", []),
	"network": {"posture": "off", "allow": []},
	"limits": object.get(cfg, "limits", {}),
} if {
	input.tool in cfg.tools
}
