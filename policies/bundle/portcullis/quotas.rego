# METADATA
# title: Portcullis quotas
# description: |
#   Contract section 10 from data: data.portcullis.config.quotas is a list
#   of {"tool", "limit", "window_s", "cost"} ("tool": a tool name, or "*"
#   for every tool). Each entry that names the call's tool gives the
#   decision a quota keyed "<principal>/<tool>" (or "<principal>/*"): at
#   most limit units of cost per window_s seconds, counted in the evidence
#   store, so the limit holds across replicas on PostgreSQL.
package portcullis.quotas

import data.portcullis.config
import data.portcullis.grants

_entries := config.quotas if is_array(config.quotas)

else := []

# quotas are the call's quotas, in the order of the data.
quotas := [q |
	some e in _entries
	e.tool in {input.tool, "*"}
	q := {
		"key": sprintf("%s/%s", [grants.principal_id, e.tool]),
		"limit": e.limit,
		"window_s": e.window_s,
		"cost": object.get(e, "cost", 1),
	}
] if {
	input.purpose == "call"
	grants.principal_id
} else := []
