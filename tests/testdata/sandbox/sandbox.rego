# Package portcullis is the sandbox suite's policy: like the e2e policy, but
# the network posture and allowlist come from data too, so the suite can run
# the same binary under posture off and allowlist.
#
# data.e2e.principals[<principal id>] = {
#   "tools": ["Exec"], "fs_grants": [...], "limits": {...},
#   "network": {"posture": "off|allowlist|full", "allow": [...]}
# }
package portcullis

default decision := {"allow": false, "reasons": ["sandbox e2e: no grant for this principal and tool"]}

cfg := data.e2e.principals[input.principal.id]

decision := {
	"allow": true,
	"reasons": [sprintf("sandbox e2e: %s may call %s", [input.principal.id, input.tool])],
	"fs_grants": object.get(cfg, "fs_grants", []),
	"network": object.get(cfg, "network", {"posture": "off", "allow": []}),
	"env": {"pass": [], "set": {}},
	"limits": object.get(cfg, "limits", {}),
} if {
	input.tool in cfg.tools
}
