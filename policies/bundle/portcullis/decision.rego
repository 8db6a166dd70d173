# METADATA
# title: Portcullis decision
# description: |
#   The entry point the gateway evaluates: data.portcullis.decision. It allows
#   a call when the principal is granted the tool (grants.rego) and no deny
#   rule fires; the allow also carries the call's fs grants, network posture,
#   env and limits, taken from the grant over config.defaults.
#   purpose "list" asks only whether the tool is granted (args are empty).
#   Grants and profiles are read from index.rego, which the engine evaluates
#   once per bundle; the common allowed call takes a fast path (_fast) that
#   does not collect deny reasons, and full_decision is the reference.
package portcullis

import data.portcullis.approvals
import data.portcullis.exec
import data.portcullis.grants
import data.portcullis.quotas

# decision is denied unless a rule below says otherwise. An allowed call
# carries the controls approvals.rego and quotas.rego add: an approval
# part when a person must approve it, quotas when it draws on a budget.
default decision := {"allow": false, "reasons": ["no rule allowed the call"], "rule_ids": ["decision.default_deny"]}

decision := decision_base if {
	not _controls_possible
} else := object.union(d, _controls(d)) if {
	d := decision_base
	d.allow == true
	_has_controls
} else := decision_base

# _controls_possible is the cheap test that keeps the common call (no
# prod principal, no quotas in data) off the controls' rules.
_controls_possible if input.principal.attributes.environment == "prod"

_controls_possible if data.portcullis.config.quotas

_has_controls if approvals.requirement

_has_controls if count(quotas.quotas) > 0

_controls(d) := object.union(_approval_part(d), _quota_part)

_approval_part(d) := {"approval": approvals.requirement, "rule_ids": array.concat(d.rule_ids, ["approvals.prod_exec"])} if {
	approvals.requirement
} else := {}

_quota_part := {"quotas": quotas.quotas} if count(quotas.quotas) > 0

else := {}

default decision_base := {"allow": false, "reasons": ["no rule allowed the call"], "rule_ids": ["decision.default_deny"]}

decision_base := d if {
	d := _fast
} else := full_decision

# full_decision is the decision from every deny rule: refused with every
# reason when one applies, else allowed.
full_decision := {"allow": false, "reasons": sort(deny), "rule_ids": sort(deny_rule_ids)} if {
	count(denials) > 0
} else := _allowed

# _fast is the decision for a call that no deny rule refuses, computed
# without collecting reasons: the common case. When it is undefined,
# full_decision decides; when defined, it equals full_decision
# (decision_test.rego checks this for every case it tries).
_fast := d if {
	input.tool == "Exec"
	input.purpose in {"call", "dry_run"}
	c := grants.compiled
	count(c.malformed) == 0
	es := exec.fast_env_set
	count(es) > 0
	d := object.union(c.call, object.union({"env": {"set": es}, "rule_ids": array.concat(c.rule_ids, exec.fast_rule_ids)}, exec.fast_exec))
} else := d if {
	input.tool == "Exec"
	input.purpose in {"call", "dry_run"}
	c := grants.compiled
	count(c.malformed) == 0
	count(exec.fast_env_set) == 0
	d := object.union(c.call, object.union({"rule_ids": array.concat(c.rule_ids, exec.fast_rule_ids)}, exec.fast_exec))
}

_fast := d if {
	input.tool != "Exec"
	input.purpose in {"call", "dry_run", "launch"}
	c := grants.compiled
	count(c.malformed) == 0
	not _upstream_denied
	d := c.call
}

_fast := d if {
	input.purpose == "list"
	c := grants.compiled
	count(c.malformed) == 0
	not _upstream_denied
	d := c.list
}

_principal_text := grants.principal_id if {
	grants.principal_id
} else := "<unknown principal>"

_tool_text := input.tool if {
	is_string(input.tool)
} else := "<no tool>"

_purpose_text := input.purpose if {
	is_string(input.purpose)
	input.purpose != ""
} else := "<none>"

# denials are every refusal of the call, each a reason and the id of the
# rule that produced it (docs/policies.md#rule-ids).
denials contains {"rule": "decision.unknown_purpose", "reason": sprintf("unknown purpose %s: want call, dry_run, list or launch", [_purpose_text])} if {
	not _purpose_known
}

# Helper rules rather than `not x in S`: negation over a possibly undefined
# operand is easy to get wrong, and this is a deny path.
_purpose_known if input.purpose in {"call", "dry_run", "list", "launch"}

denials contains {"rule": "grants.no_grant", "reason": sprintf("tool %s not granted to %s", [_tool_text, _principal_text])} if {
	not grants.compiled
}

denials contains {"rule": "grants.malformed", "reason": msg} if {
	some msg in grants.compiled.malformed
}

denials contains d if {
	some d in upstream_denials
}

denials contains d if {
	input.tool == "Exec"
	_checks_args
	grants.compiled
	some d in exec.denials
}

# deny collects every reason the call is refused.
deny := {d.reason | some d in denials}

# deny_rule_ids are the ids of the rules that refuse the call.
deny_rule_ids := {d.rule | some d in denials}

_checks_args if input.purpose in {"call", "dry_run"}

# _allowed is the answer when nothing denies: the compiled grant (index.rego)
# holds it, with the settings of the matched Exec shapes added to env.set
# and their rule ids to the grant's.
_allowed := grants.compiled.list if input.purpose == "list"

# A stdio upstream's launch (tool "<upstream>", principal role
# "upstream") gets its grant's scope like a call.
_allowed := grants.compiled.call if input.purpose == "launch"

_allowed := _call_allowed if _checks_args

_call_allowed := object.union(c, object.union({"env": {"set": exec.env_set}, "rule_ids": array.concat(c.rule_ids, exec.shape_rule_ids)}, exec.exec_part)) if {
	input.tool == "Exec"
	c := grants.compiled.call
} else := grants.compiled.call

# fs_grants are the directories the call may touch; the gateway checks real paths.
fs_grants := grants.compiled.fs_grants

# network is the call's posture; off unless the grant says otherwise.
network := grants.compiled.network

# env is what passes from the gateway and what is set, plus Exec shape settings.
env := object.union(grants.compiled.env, {"set": exec.env_set}) if {
	input.tool == "Exec"
	count(exec.env_set) > 0
} else := grants.compiled.env

# limits are the config defaults overridden key by key by the grant.
limits := grants.compiled.limits
