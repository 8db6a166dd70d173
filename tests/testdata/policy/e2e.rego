# Package portcullis is the end-to-end suite's own policy. It is deliberately
# tiny and entirely data-driven: the harness writes data.json beside it for
# every deployment (random temp dirs), so the acceptance tests never depend on
# the shipped policy library.
#
# data.e2e.principals[<principal id>] = {
#   "tools": ["Exec", ...],              tools this principal may call
#   "fs_grants": [{"path", "mode"}],     returned verbatim
#   "env": {"pass": [...], "set": {}},   returned verbatim
#   "limits": {...}                      returned verbatim
#   "approval": {...}, "quotas": [...]   returned verbatim when present
# }
package portcullis

default decision := {"allow": false, "reasons": ["e2e: no grant for this principal and tool"], "rule_ids": ["e2e.no_grant"]}

# cfg is the test data for the calling principal (undefined for strangers).
cfg := data.e2e.principals[input.principal.id]

decision := object.union(_allowed, object.filter(cfg, ["approval", "quotas"])) if {
	input.tool in cfg.tools
}

_allowed := {
	"allow": true,
	"reasons": [sprintf("e2e: %s may call %s", [input.principal.id, input.tool])],
	"rule_ids": ["e2e.grant"],
	"fs_grants": object.get(cfg, "fs_grants", []),
	"network": {"posture": "off", "allow": []},
	"env": object.get(cfg, "env", {"pass": [], "set": {}}),
	"limits": object.get(cfg, "limits", {}),
}
