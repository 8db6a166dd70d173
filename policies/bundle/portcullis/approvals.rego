# METADATA
# title: Portcullis human approval
# description: |
#   An example of contract section 9: in production (the principal's
#   attributes.environment == "prod"), an allowed Exec call whose program
#   is not on the read-only allowlist waits for a person (role approver or
#   admin) before it runs. The allowlist is data:
#   data.portcullis.config.approvals.readonly_programs (basenames of the
#   real argv[0]) and readonly_git (git subcommands that only read).
#   Quotas (section 10) are added the same way: see docs/policies.md.
package portcullis.approvals

import data.portcullis.config

_default_readonly := {"cat", "echo", "head", "ls", "pwd", "stat", "tail", "wc", "grep", "true", "uname"}

_default_git := {"status", "log", "diff", "show"}

readonly_programs := {p | some p in config.approvals.readonly_programs} if {
	is_array(config.approvals.readonly_programs)
} else := _default_readonly

readonly_git := {s | some s in config.approvals.readonly_git} if {
	is_array(config.approvals.readonly_git)
} else := _default_git

# ttl_s is how long a parked call waits for a person.
ttl_s := config.approvals.ttl_s if {
	is_number(config.approvals.ttl_s)
} else := 900

_prod if input.principal.attributes.environment == "prod"

_program := input.resolved.argv0_base

_readonly if _program in readonly_programs

_readonly if {
	_program == "git"
	input.args.argv[1] in readonly_git
}

# required holds for an Exec call in prod outside the read-only allowlist.
required if {
	input.tool == "Exec"
	input.purpose in {"call", "dry_run"}
	_prod
	not _readonly
}

# requirement is the decision's approval part when one is required.
requirement := {
	"required": true,
	"reason": sprintf("Exec of %s in prod needs a person's approval", [_program_text]),
	"approvers": ["role:approver"],
	"ttl_s": ttl_s,
} if required

_program_text := _program if is_string(_program)

else := "<unknown program>"
