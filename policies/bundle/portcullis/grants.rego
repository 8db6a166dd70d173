# METADATA
# title: Portcullis grants
# description: |
#   Computes the effective grant of the calling principal for input.tool from
#   data.portcullis.config. Grants live in data so operators change data.json,
#   never Rego.
#
#   Resolution, in order:
#   1. Role grants: config.roles[ROLE].tools[TOOL] for the principal's roles,
#      taken in the order the principal lists them; the first role that grants
#      the tool wins (roles are not merged with each other).
#   2. Principal entry: config.principals[ID].tools[TOOL] is merged over the
#      role grant with object.union: objects (limits, env.set, network) merge
#      key by key, arrays and scalars (fs, env.pass, network.allow, profile)
#      replace. A principal entry may also grant a tool none of its roles has.
#   3. fs_add (in either grant) is appended to fs: a principal extends its
#      role's fs grants without repeating them.
#   4. config.principals[ID].revoke lists tools taken away whatever the roles say.
#   A principal with neither a role grant nor an entry gets nothing (deny).
package portcullis.grants

import data.portcullis.config
import data.portcullis.index

# principal_id is the caller's id, or undefined when it is not a non-empty string.
principal_id := id if {
	id := input.principal.id
	is_string(id)
	id != ""
}

# roles are the principal's role names in the order the principal lists them.
roles := [r | some r in input.principal.roles; is_string(r)] if {
	is_array(input.principal.roles)
} else := []

_role_grants(tool) := [g |
	some r in roles
	g := config.roles[r].tools[tool]
	is_object(g)
]

# role_grant is the grant of the first of the principal's roles that grants tool.
role_grant(tool) := gs[0] if {
	gs := _role_grants(tool)
	count(gs) > 0
}

# principal_entry is config.principals[ID] when it is an object.
principal_entry := e if {
	e := config.principals[principal_id]
	is_object(e)
}

# principal_grant is the principal's own grant (or override) for tool.
principal_grant(tool) := g if {
	g := principal_entry.tools[tool]
	is_object(g)
}

# revoked holds when the principal's entry takes tool away.
revoked(tool) if tool in principal_entry.revoke

# grant_for is the effective grant of the principal for tool, undefined when
# the tool is not granted.
grant_for(tool) := index.with_fs_add(object.union(role_grant(tool), principal_grant(tool))) if {
	not revoked(tool)
}

grant_for(tool) := index.with_fs_add(role_grant(tool)) if {
	not revoked(tool)
	not principal_grant(tool)
}

grant_for(tool) := index.with_fs_add(principal_grant(tool)) if {
	not revoked(tool)
	not role_grant(tool)
}

# compiled is the compiled grant (index.rego) for the tool being decided,
# undefined when the tool is not granted. It follows grant_for, reading the
# grants the index merged once per bundle: this is the hot path.
compiled := c if {
	not index.own[principal_id] # no principal entry: the common case
	c := index.role_tool[_first_role][_tool]
} else := c if {
	not _revoked
	c := index.merged[principal_id][_first_role][_tool]
} else := c if {
	not _revoked
	not index.own[principal_id][_tool]
	c := index.role_tool[_first_role][_tool]
} else := c if {
	not _revoked
	not _first_role
	c := index.own[principal_id][_tool]
}

# effective is the grant for the tool being decided.
effective := compiled.grant

_tool := input.tool if is_string(input.tool)

# _first_role is the first of the principal's roles that grants the tool.
_first_role := rs[0] if {
	is_array(input.principal.roles)
	rs := [r | some r in input.principal.roles; is_string(r); index.role_tool[r][_tool]]
}

_revoked if _tool in principal_entry.revoke

# granted_tools lists every tool the principal may call (for documentation and tests;
# GET /v1/tools asks per tool with purpose "list").
granted_tools contains tool if {
	some r in roles
	some tool, _ in config.roles[r].tools
	grant_for(tool)
}

granted_tools contains tool if {
	some tool, _ in principal_entry.tools
	grant_for(tool)
}

# malformed holds reasons why the effective grant is ill-typed; any of them denies.
malformed contains msg if {
	some msg in compiled.malformed
}
