# METADATA
# title: Portcullis Exec profiles
# description: |
#   Exec profiles as policy. A grant for Exec names a profile
#   (default "passive"); profiles live in data.portcullis.config.exec.profiles:
#     any_argv     true: any argv (the gateway still checks argv0's real path
#                  lies in an fs grant)
#     caller_env   true: the caller may send env (never under "passive")
#     argv0_dirs   the real path of argv0 must lie under one of these
#     aliases      [{pattern, program}]: a real basename matching the
#                  anchored pattern is known as program (python3.11 -> python3)
#     programs     {PROGRAM: [shape, ...]}, keyed by the real argv0's basename
#                  (or alias); "*" holds shapes for any program. Unless
#                  any_argv, one shape for the program must match. A shape:
#       prefix           literal leading arguments (subcommand)
#       operands         true: non-option arguments allowed after the prefix
#       flags            anchored regex every option argument must match
#       max_rest         most arguments after the prefix
#       min_operands     fewest non-option arguments after the prefix
#       require          arguments that must appear after the prefix
#       env_set          variables set for the call when the shape matches
#       hint             said in the deny reason when program and prefix matched
#       insert_before    arguments the gateway forces right after argv[0]
#       insert_after     arguments the gateway forces right after the prefix
#       path_operands    false: operands are not paths (default true: each
#                        operand, and everything after "--", names a path
#                        the gateway holds against the grants)
#       path_flags       options whose "=VALUE" names a path (["--config"])
#       exec_restrict    true: the program may execute nothing but itself,
#                        its interpreter and exec_allow (default: the
#                        program's harden entry, else the profile's)
#       exec_allow       further files or directories it may execute:
#                        absolute, or relative to argv[0]'s real directory
#                        (relative entries are dropped when argv[0] lies in
#                        a writable grant: the agent could aim them anywhere)
#     harden       {PROGRAM: {insert_before, insert_after, env_set,
#                  path_flags, exec_restrict, exec_allow}}: hardening every
#                  shape of PROGRAM gets (its "*" shapes too), so a shape
#                  added later cannot forget it; a shape's own settings add
#                  to it (exec_restrict: override it)
#     exec_restrict  the default exec_restrict of the profile's shapes
#     refusals     [{program, prefix, reason}]: shapes deliberately left out,
#                  with the reason the deny message gives
#   The decision of a call that matches a shape carries "exec": the forced
#   arguments (insert), the path arguments (path_args) and the exec
#   restriction (exec_restrict, exec_allow); the gateway enforces all three.
#   Caller env names that subvert programs are denied under every profile: a
#   baseline here that data can only extend (config.exec.env_deny); so is a
#   caller env name that a matching shape sets.
package portcullis.exec

import data.portcullis.config
import data.portcullis.grants
import data.portcullis.index

# profile_name is the grant's profile; the most restrictive one when unset.
default profile_name := "passive"

profile_name := grants.compiled.profile

# profile is the named profile's definition, undefined when unknown.
profile := _compiled.profile

# _compiled is the profile compiled for matching (index.rego).
_compiled := index.profiles[profile_name]

_args_obj := input.args if {
	is_object(input.args)
} else := {}

_resolved := input.resolved if {
	is_object(input.resolved)
} else := {}

# argv is the caller's argv.
argv := _args_obj.argv

# argv_ok holds when argv is a non-empty array of non-empty strings.
argv_ok if {
	is_array(argv)
	count(argv) > 0
	not "" in argv
	every a in argv {
		is_string(a)
	}
}

# args are argv[1:].
args := array.slice(argv, 1, count(argv)) if argv_ok

# base is the basename of argv0's real path, as resolved by the gateway.
base := b if {
	b := _resolved.argv0_base
	is_string(b)
	b != ""
}

# argv0 is argv0's real path, as resolved by the gateway.
argv0 := p if {
	p := _resolved.argv0
	is_string(p)
	startswith(p, "/")
}

# env_names are the caller's environment names, from args and resolved facts.
env_names contains n if {
	some n, _ in _args_obj.env
	is_object(_args_obj.env)
}

env_names contains n if {
	some n in _resolved.env_names
	is_string(n)
}

# Baseline of names that make programs load or run something else. Data may
# add to it, never remove from it.
_baseline_names := {
	"BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND", "IFS", "CDPATH",
	"PATH", "HOME", "SHELL",
	"GIT_EXEC_PATH", "GIT_DIR", "GIT_WORK_TREE", "GIT_EXTERNAL_DIFF", "GIT_PAGER", "GIT_EDITOR",
	"GIT_ASKPASS", "GIT_PROXY_COMMAND", "GIT_TEMPLATE_DIR", "GIT_ALTERNATE_OBJECT_DIRECTORIES",
	"GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "SSH_ASKPASS", "EDITOR", "VISUAL", "PAGER", "MANPAGER",
	"LESSOPEN", "LESSCLOSE", "LESSKEY",
	"PYTHONSTARTUP", "PYTHONPATH", "PYTHONHOME", "PYTHONINSPECT", "PYTHONUSERBASE", "PYTHONBREAKPOINT",
	"PYTHONEXECUTABLE", "PYTHONPLATLIBDIR", "PYTHONSAFEPATH",
	"NODE_OPTIONS", "NODE_PATH", "NODE_REPL_EXTERNAL_MODULE",
	"PERL5OPT", "PERL5LIB", "PERLLIB", "PERL5DB", "PERL_MB_OPT", "PERL_MM_OPT",
	"RUBYOPT", "RUBYLIB", "GEM_HOME", "GEM_PATH",
	"JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH",
	"GOFLAGS", "GOENV", "GOTOOLCHAIN", "GOROOT", "GOPATH", "GOPROXY", "GONOSUMDB", "GOINSECURE",
	"CC", "CXX", "CPP", "AR", "LD", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS",
	"RUSTC_WRAPPER", "RUSTC", "RUSTFLAGS", "RUSTDOCFLAGS",
	"GCONV_PATH", "LOCPATH", "NLSPATH", "GLIBC_TUNABLES", "HOSTALIASES", "RESOLV_HOST_CONF",
	"TZDIR", "MALLOC_CHECK_", "MALLOC_PERTURB_", "LIBRARY_PATH", "CPATH", "PKG_CONFIG_PATH",
	"XDG_CONFIG_HOME", "XDG_CONFIG_DIRS", "XDG_DATA_DIRS", "INPUTRC", "TERMINFO", "TERMINFO_DIRS",
	"OPENSSL_CONF", "OPENSSL_ENGINES", "SSL_CERT_FILE", "SSL_CERT_DIR", "CURL_CA_BUNDLE",
	"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
	"DENO_DIR", "DENO_AUTH_TOKENS", "NPM_CONFIG_USERCONFIG",
}

_baseline_prefixes := {
	"LD_", "DYLD_", "GIT_CONFIG", "GIT_SSH", "BASH_FUNC_", "PYTHON", "NPM_CONFIG_", "CARGO_",
	"GIT_TRACE", "JAVA_", "MALLOC_", "LUA_", "TCL", "R_",
}

_extra_names := {upper(n) | some n in config.exec.env_deny.names; is_string(n)}

_extra_prefixes := {upper(p) | some p in config.exec.env_deny.prefixes; is_string(p); p != ""}

# denied_env holds for a caller env name on the deny list. Names compare upper-cased.
denied_env(n) if upper(n) in _baseline_names

denied_env(n) if upper(n) in _extra_names

denied_env(n) if {
	some p in (_baseline_prefixes | _extra_prefixes)
	startswith(upper(n), p)
}

# denials are the Exec-specific refusals of calls and dry runs, each a
# reason and the rule id that names it (docs/policies.md#rule-ids).
denials contains {"rule": "exec.argv_invalid", "reason": "argv must be a non-empty array of non-empty strings"} if not argv_ok

denials contains {"rule": "exec.env_invalid", "reason": "env must be an object of string values"} if {
	object.get(_args_obj, "env", null) != null
	not _env_ok
}

_env_ok if {
	is_object(_args_obj.env)
	every _, v in _args_obj.env {
		is_string(v)
	}
}

denials contains {"rule": "exec.env_deny", "reason": sprintf("caller env %s not allowed: it can change what the program loads or runs", [n])} if {
	some n in env_names
	denied_env(n)
}

denials contains {"rule": "exec.env_forced", "reason": sprintf("caller env %s not allowed: the profile sets it for this program", [n])} if {
	some n in env_names
	some k, _ in env_set
	upper(n) == upper(k)
}

denials contains {"rule": "exec.unresolved", "reason": "Exec input not resolved by the gateway: resolved.argv0 missing"} if not argv0

denials contains {"rule": "exec.unknown_profile", "reason": sprintf("unknown exec profile %s", [profile_name])} if not profile

denials contains {"rule": "exec.caller_env", "reason": sprintf("caller env not allowed by profile %s: %s", [profile_name, concat(", ", sort(env_names))])} if {
	count(env_names) > 0
	profile
	not _caller_env_allowed
}

_caller_env_allowed if {
	profile_name != "passive"
	profile.caller_env == true
}

denials contains {"rule": "exec.argv0_dir", "reason": sprintf("program %s not allowed by profile %s: not under %s", [_argv0_text, profile_name, concat(", ", _compiled.dirs)])} if {
	prefixes := _compiled.dir_prefixes # set when argv0_dirs is an array
	not strings.any_prefix_match(argv0, prefixes)
}

_argv0_text := argv0 if {
	argv0
} else := "<unresolved>"

# deny are the reasons of the denials.
deny := {d.reason | some d in denials}

denials contains {"rule": "exec.shape_mismatch", "reason": sprintf("argv shape not allowed by profile %s: %s%s", [profile_name, _shown, _hints])} if {
	profile
	argv_ok
	not _compiled.any_argv
	not shape_matched
}

_shown := s if {
	full := concat(" ", array.concat([object.get(_resolved, "argv0_base", "?")], args))
	s := _truncate(full, 200)
}

_truncate(s, n) := s if {
	count(s) <= n
} else := concat("", [substring(s, 0, n), "…"])

_hints := concat("", [h | some h in _near_miss_hints]) if {
	count(_near_miss_hints) > 0
} else := ""

_near_miss_hints contains concat("", [" (", s.hint, ")"]) if {
	some s in candidate_shapes
	is_string(s.hint)
	_prefix_ok_p(_prefix(s))
}

# A refusal (profile.refusals: [{program, prefix, reason}]) explains why a
# shape the profile deliberately leaves out is refused.
_near_miss_hints contains concat("", [" (", r.reason, ")"]) if {
	some r in profile.refusals
	r.program == _known_as
	is_string(r.reason)
	_prefix_ok_p(_prefix(r))
}

# program is the name the profile knows the real program by: its basename,
# or the program an alias pattern maps it to (python3.11 -> python3).
program := base if {
	_compiled.cands[base]
} else := ps[0] if {
	ps := [a.program |
		some a in profile.aliases
		is_string(a.pattern)
		is_string(a.program)
		regex.match(_anchor(a.pattern), base)
	]
	count(ps) > 0
}

# _known_as is program, or the real basename for a program the profile
# does not name.
_known_as := program if {
	program
} else := base

_shapes_for(name) := ss if {
	ss := profile.programs[name]
	is_array(ss)
} else := []

# candidate_shapes are the shapes for the program plus those for any program ("*").
candidate_shapes := array.concat(_shapes_for(program), _shapes_for("*")) if {
	program
} else := _shapes_for("*")

# _cands are the candidate shapes compiled (index.rego), _first_cands those
# that can match the call's arguments: a shape whose prefix does not start
# with the first argument cannot. Both are in candidate_shapes order.
_cands := c if {
	c := _compiled.cands[base]
} else := c if {
	c := _compiled.cands[program]
} else := _compiled.star

_first_cands := c if {
	c := _cands.by_first[args[0]]
} else := _cands.none

_matched := _matching(_first_cands, args)

# _matching are the shapes among cands (compiled) that match args: the
# prefix leads the arguments and the rest are at most max_rest, each an
# operand (if operands) or an option matching flags, with at least
# min_operands operands and every required argument among them.
_matching(cands, args) := [s |
	some s in cands
	array.slice(args, 0, s.n) == s.p
	rest := array.slice(args, s.n, count(args))
	count(rest) <= object.get(s, "max", count(rest))
	count([a | some a in rest; regex.match(s.arg_re[startswith(a, "-")], a)]) == count(rest)
	count([a | s.min > 0; some a in rest; not startswith(a, "-")]) >= s.min # operands, counted only when needed
	count([r | some r in s.req; r in rest]) == count(s.req)
]

# fast_env_set is env_set for a call on the fast path (fast_matched).
fast_env_set := object.union_n([e | some s in fast_matched; e := s.env_set])

# fast_exec is {"exec": plan} for a call on the fast path, {} when no shape
# matched (a profile that takes any argv).
fast_exec := {"exec": plan_for(fast_matched, array.slice(input.args.argv, 1, count(input.args.argv)))} if {
	count(fast_matched) > 0
} else := {}

# exec_part is {"exec": plan} for the call, {} when no shape matched.
exec_part := {"exec": plan_for(_matched, args)} if {
	count(_matched) > 0
} else := {}

# plan_for is the Exec plan of a call whose arguments args matched the
# compiled shapes matched (in candidate order): the first shape's forced
# arguments; the path arguments of every matched shape (a shape that does
# not treat an argument as a path cannot unmake another's check); the exec
# restriction when any matched shape restricts, with all their allows.
plan_for(matched, args) := object.union(matched[0].restriction, {"path_args": _path_args(matched[0], args), "insert": matched[0].inserts}) if {
	count(matched) == 1 # the common case: the shape's constants, as compiled
	count(matched[0].inserts) > 0
} else := object.union(matched[0].restriction, {"path_args": _path_args(matched[0], args)}) if {
	count(matched) == 1
} else := object.union_n([
	{"path_args": sort({x | some s in matched; some x in _shape_path_args(s, args)})},
	{"insert": ins | ins := matched[0].inserts; count(ins) > 0},
	_restriction(matched),
])

# _path_args are the path arguments of one shape, sorted. For the common
# shape (operands are paths, no path_flags) and arguments without "--" it
# takes a shortcut that gives the same answer (exec_hardening_test.rego
# checks both ways).
_path_args(s, args) := [{"index": k} |
	some j, a in array.slice(args, s.n, count(args))
	not startswith(a, "-")
	k := (1 + s.n) + j
] if {
	s.paths
	count(s.pflags) == 0
	not "--" in args
} else := [] if {
	not s.paths
	count(s.pflags) == 0
} else := sort(_shape_path_args(s, args))

_restriction(matched) := {"exec_restrict": true, "exec_allow": sort({a | some s in matched; some a in s.allow})} if {
	some s in matched
	s.restrict
} else := {}

# _shape_path_args are the argv positions (argv[0] is 0) of the arguments
# shape s says name paths: its operands, when path_operands; everything
# after a "--", which programs take as operands whatever it starts with;
# and the value of each "--opt=VALUE" whose name is in path_flags.
_shape_path_args(s, args) := {x |
	rest := array.slice(args, s.n, count(args))
	dd := _dashdash(rest)
	some j, a in rest
	x := _path_arg(s, a, j, dd, (1 + s.n) + j)
}

_dashdash(rest) := count(rest) if {
	not "--" in rest
} else := min({i | rest[i] == "--"})

_path_arg(s, _, j, dd, k) := {"index": k} if {
	s.paths
	j > dd
}

_path_arg(s, a, j, dd, k) := {"index": k} if {
	s.paths
	j < dd
	not startswith(a, "-")
}

_path_arg(s, a, j, dd, k) := {"index": k, "value": true} if {
	j < dd
	startswith(a, "-")
	contains(a, "=")
	split(a, "=")[0] in s.pflags
}

# fast_rule_ids are shape_rule_ids for a call on the fast path.
fast_rule_ids := _shape_rule_ids(fast_matched)

# fast_matched are the shapes that match an Exec call (or dry run) that no
# rule of denials refuses, computed in one rule for the common case: a
# caller sending no env, a program the profile names by its real basename
# (or any program, under a profile without aliases). It is undefined
# whenever denials might have a member, and then the decision comes from
# denials, env_set and shape_rule_ids. Each condition below is the negation
# of a denial rule, in order (decision_test.rego checks that both ways agree).
fast_matched := matched if {
	p := index.profiles[grants.compiled.profile] # "unknown exec profile"
	argv := input.args.argv # "argv must be ...": argv_ok
	is_array(argv)
	count(argv) > 0
	not "" in argv
	count([a | some a in argv; is_string(a)]) == count(argv)
	object.get(input.args, "env", {}) == {} # no "env must be ..." and no caller env names
	resolved := input.resolved
	object.get(resolved, "env_names", []) == []
	argv0 := resolved.argv0 # "Exec input not resolved ..."
	is_string(argv0)
	startswith(argv0, "/")
	strings.any_prefix_match(argv0, object.get(p, "dir_prefixes", [""])) # "program ... not under"
	base := resolved.argv0_base # "argv shape not allowed": _cands as below
	is_string(base)
	base != ""
	cands := object.get(p.cands, base, object.get(p, "unaliased", null)) # null: an alias may name the program
	args := array.slice(argv, 1, count(argv))
	first := object.get(cands.by_first, concat("", array.slice(args, 0, 1)), cands.none)
	matched := _matching(first, args)
	_shape_ok(p, matched)
}

_shape_ok(p, _) if p.any_argv

_shape_ok(_, matched) if count(matched) > 0

# matched_shapes are the shapes that match the call, in candidate order.
matched_shapes := [s.shape | some s in _matched]

# shape_matched holds when some shape of the profile matches the call.
shape_matched if count(_matched) > 0

# env_set are variables the matching shapes set for the call, later shapes winning.
env_set := object.union_n([e | some s in _matched; e := s.env_set])

# shape_rule_ids are the rule ids of the shapes that match the call, sorted,
# or "exec.any_argv" when none does and the profile takes any argv.
shape_rule_ids := _shape_rule_ids(_matched)

_shape_rule_ids(matched) := sort({s.id | some s in matched}) if {
	count(matched) > 0
} else := ["exec.any_argv"]

_anchor(re) := concat("", ["^(?:", re, ")$"])

_prefix(s) := p if {
	p := object.get(s, "prefix", [])
	is_array(p)
}

_prefix_ok_p(p) if {
	n := count(p)
	count(args) >= n
	array.slice(args, 0, n) == p
}

_operand(a) if not startswith(a, "-")

_shape_arg_ok(s, a) if {
	_operand(a)
	s.operands == true
}

_shape_arg_ok(s, a) if {
	startswith(a, "-")
	is_string(s.flags)
	regex.match(_anchor(s.flags), a)
}

_int_or(s, k, d) := v if {
	v := object.get(s, k, d)
	is_number(v)
}

# matches holds when shape s accepts the call's real program and arguments.
matches(s) if {
	is_object(s)
	p := _prefix(s)
	_prefix_ok_p(p)
	rest := array.slice(args, count(p), count(args))
	count(rest) <= _int_or(s, "max_rest", count(rest))
	every a in rest {
		_shape_arg_ok(s, a)
	}
	count([a | some a in rest; _operand(a)]) >= _int_or(s, "min_operands", 0)
	every r in object.get(s, "require", []) {
		r in rest
	}
}
