# METADATA
# title: Portcullis config index
# description: |
#   Views of data.portcullis.config shaped for the decision's hot path, so
#   a decision reads them with direct lookups instead of merging grants and
#   scanning profiles on every call:
#     role_tool[ROLE][TOOL]          the compiled grant of a role
#     own[ID][TOOL]                  a principal entry's own compiled grant
#     merged[ID][ROLE][TOOL]         a principal entry merged over a role grant
#     profiles[NAME]                 an Exec profile compiled for matching
#   A compiled grant holds the effective grant ("grant", fs_add applied), its
#   "profile" name, its "malformed" reasons, the answer to a "list" request
#   and, when the grant is well-typed, the allow answer to a "call" (with
#   its "fs_grants", "network", "env" and "limits").
#
#   Rules in this package must not read input: the engine evaluates them
#   once per loaded bundle and serves their values to every decision (it
#   checks this at load, and leaves any rule that reads input, or calls a
#   non-deterministic built-in, to be evaluated per call).
package portcullis.index

import data.portcullis.config

# with_fs_add appends fs_add to fs: a principal extends its role's fs
# grants without repeating them.
with_fs_add(g) := object.union(g, {"fs": array.concat(_fs_of(g), g.fs_add)}) if {
	is_array(g.fs_add)
} else := g

_fs_of(g) := g.fs if {
	is_array(g.fs)
} else := []

_defaults := config.defaults if {
	is_object(config.defaults)
} else := {}

# role_tool[ROLE][TOOL] is a role's compiled grant for a tool.
role_tool := {r: {t: _compile(with_fs_add(g), t, [_grant_id("role", r, t)]) |
	some t, g in role.tools
	is_object(g)
} |
	some r, role in config.roles
}

_entries := {id: e |
	some id, e in config.principals
	is_object(e)
}

# own[ID][TOOL] is the compiled grant of a principal's own entry for a tool.
own := {id: {t: _compile(with_fs_add(g), t, [_grant_id("principal", id, t)]) |
	some t, g in e.tools
	is_object(g)
} |
	some id, e in _entries
}

# merged[ID][ROLE][TOOL] is a principal's own entry for a tool merged with
# object.union over the role's grant for it.
merged := {id: {r: {t: _compile(with_fs_add(object.union(rg, g)), t, [_grant_id("role", r, t), _grant_id("principal", id, t)]) |
	some t, g in e.tools
	is_object(g)
	rg := config.roles[r].tools[t]
	is_object(rg)
} |
	some r, _ in config.roles
} |
	some id, e in _entries
}

_compile(g, tool, ids) := object.union_n([
	{
		"grant": g,
		"profile": _profile_name(g),
		"malformed": _malformed(g, tool),
		"rule_ids": ids,
		"list": {"allow": true, "reasons": [], "rule_ids": ids},
	},
	{"fs_grants": x | x := _fs_grants(g)},
	{"network": x | x := _network(g)},
	{"env": x | x := _env(g)},
	{"limits": x | x := _limits(g)},
	{"call": x | x := _call(g, ids)},
])

# _grant_id is the rule id of a grant: "grant:role/ROLE/TOOL" or
# "grant:principal/ID/TOOL" (characters a rule id cannot hold become "_").
_grant_id(kind, name, tool) := rule_id(sprintf("grant:%s/%s/%s", [kind, name, tool]))

# rule_id makes s a valid rule id: characters outside A-Z a-z 0-9 _ . : / -
# become "_", and it is cut to 128 characters.
rule_id(s) := substring(regex.replace(s, "[^A-Za-z0-9_.:/-]", "_"), 0, 128)

# A grant without a (string) profile gets the most restrictive one.
_profile_name(g) := p if {
	p := g.profile
	is_string(p)
} else := "passive"

_call(g, ids) := {
	"allow": true,
	"reasons": [],
	"rule_ids": ids,
	"fs_grants": _fs_grants(g),
	"network": _network(g),
	"env": _env(g),
	"limits": _limits(g),
}

# fs_grants are the directories the call may touch; the gateway checks real
# paths. allow_autorun (true) lifts the file tools' autorun guard for a grant.
_fs_grants(g) := [{k: v | some k in ["path", "mode", "alias", "allow_autorun"]; v := x[k]} | some x in object.get(g, "fs", [])]

# network is the call's posture; off unless the grant says otherwise.
_network(g) := object.union({"posture": "off", "allow": []}, object.get(g, "network", {}))

# env is what passes from the gateway and what is set (Exec shapes add to set).
_env(g) := object.union({"pass": [], "set": {}}, object.get(g, "env", {}))

# limits are the config defaults overridden key by key by the grant.
_limits(g) := object.union(object.get(_defaults, "limits", {}), object.get(g, "limits", {}))

# _malformed are the reasons why a grant is ill-typed; any of them denies.
_malformed(g, tool) := ({msg |
	some k in ["fs", "fs_add"]
	_present(g, k)
	not is_array(g[k])
	msg := sprintf("grant for %s is malformed: %s must be an array", [tool, k])
} | {msg |
	some k in ["network", "env", "limits"]
	_present(g, k)
	not is_object(g[k])
	msg := sprintf("grant for %s is malformed: %s must be an object", [tool, k])
}) | {msg |
	_present(g, "profile")
	not is_string(g.profile)
	msg := sprintf("grant for %s is malformed: profile must be a string", [tool])
}

_present(obj, k) if {
	some key, _ in obj
	key == k
}

# profiles[NAME] is an Exec profile compiled for matching (exec.rego):
#   profile       the profile as configured
#   any_argv      profile.any_argv == true
#   dir_prefixes  argv0_dirs as path prefixes ("/usr/bin/"), when argv0_dirs is an array
#   dirs          the string entries of argv0_dirs, for the deny reason
#   cands         {PROGRAM: candidates} for every PROGRAM with an array of
#                 shapes or a harden entry: its shapes followed by those for
#                 any program ("*"), all hardened for PROGRAM
#   star          the candidates of a program the profile does not name
#   unaliased     star, when the profile has no aliases: the candidates of
#                 any basename the profile does not name
# Candidates are {"by_first": {TOKEN: [shape, ...]}, "none": [shape, ...]}:
# the shapes that can match arguments starting with TOKEN (a prefix starting
# with TOKEN, or none), for every TOKEN a prefix starts with, and the shapes
# without a prefix. Both keep the order of the profile.
profiles := {name: _profile(p) |
	some name, p in config.exec.profiles
	is_object(p)
}

_profile(p) := object.union_n([
	{
		"profile": p,
		"any_argv": _is_true(object.get(p, "any_argv", false)),
		"dirs": _dirs(p),
		"cands": {prog: _cands(_shapes(prog, _prog_shapes(p, prog), p), _star(p, prog)) | some prog in _programs(p)},
		"star": _cands([], _star(p, "*")),
	},
	{"dir_prefixes": x | is_array(p.argv0_dirs); x := _dir_prefixes(p)},
	{"unaliased": x | not _has_aliases(p); x := _cands([], _star(p, "*"))},
])

# _programs are the programs a profile names: with shapes, or hardened.
_programs(p) := {prog | some prog, ss in p.programs; is_array(ss); prog != "*"} | {prog | some prog, h in p.harden; is_object(h); prog != "*"}

_prog_shapes(p, prog) := ss if {
	ss := p.programs[prog]
	is_array(ss)
} else := []

_has_aliases(p) if {
	some a in p.aliases
	is_string(a.pattern)
	is_string(a.program)
}

_dirs(p) := [d | some d in p.argv0_dirs; is_string(d)]

_dir_prefixes(p) := [concat("", [trim_right(d, "/"), "/"]) |
	some d in _dirs(p)
	startswith(d, "/")
]

# _star are the shapes for any program ("*"), hardened for prog (none for
# "*" itself: a program the profile does not name).
_star(p, prog) := [cs | some s in ss; cs := _shape(s, "*", _harden(p, prog), p)] if {
	ss := p.programs["*"]
	is_array(ss)
} else := []

_shapes(prog, ss, p) := [cs | some s in ss; cs := _shape(s, prog, _harden(p, prog), p)]

# _harden is a program's hardening (harden[PROGRAM]), applied to every shape
# that matches it; {} when none. A malformed one (not an object) is
# returned as it is, and then no shape of the program can match (_shape).
_harden(p, prog) := h if {
	prog != "*"
	h := p.harden[prog]
} else := {}

# _shape_id is the rule id of a shape: its "id" when a string, else
# "exec.shape.PROGRAM[.PREFIX...]", PROGRAM "any" for the shapes of "*".
_shape_id(s, prog) := rule_id(s.id) if {
	is_string(s.id)
	s.id != ""
} else := rule_id(concat(".", array.concat(["exec.shape", _prog_name(prog)], [a | some a in s.prefix; is_string(a)]))) if {
	is_array(s.prefix)
} else := rule_id(concat(".", ["exec.shape", _prog_name(prog)]))

_prog_name(prog) := "any" if {
	prog == "*"
} else := prog

_cands(prog, star) := {
	"by_first": {tok: [s | some s in shapes; _can_lead(s, tok)] |
		some s0 in shapes
		s0.n > 0
		tok := s0.p[0]
	},
	"none": [s | some s in shapes; s.n == 0],
} if {
	shapes := array.concat(prog, star)
}

_can_lead(s, _) if s.n == 0

_can_lead(s, tok) if s.p[0] == tok

# _shape is shape s, hardened by h (the program's harden entry) under
# profile prof, with its fields checked and normalized; undefined for a
# shape that can never match (not an object, a prefix that is not an array,
# a max_rest or min_operands that is not a number, a require that is not a
# collection, or hardening fields of the shape or of h that are not what
# they must be: a hardening that cannot be applied must not be dropped).
#   shape     s as configured
#   p, n      the prefix and its length
#   arg_re    {true: pattern for options, false: pattern for operands}: the
#             anchored flags, when a string; "" (anything), when operands is true
#   max       max_rest, when set
#   min       min_operands, 0 when unset
#   req       the set of required arguments
#   env_set   h's env_set with the shape's over it
#   before    forced arguments after argv[0] (h's, then the shape's insert_before)
#   after     forced arguments after the prefix (insert_after, likewise)
#   paths     path_operands: operands name paths (default true)
#   pflags    path_flags: options whose "=VALUE" names a path
#   restrict  exec_restrict: the shape's, else h's, else the profile's
#   allow     exec_allow: h's then the shape's
#   id        the shape's rule id (_shape_id)
_shape(s, prog, h, prof) := object.union_n([
	{
		"shape": s,
		"id": _shape_id(s, prog),
		"p": p,
		"n": count(p),
		"arg_re": object.union(
			{true: re | f := s.flags; is_string(f); re := concat("", ["^(?:", f, ")$"])},
			{false: "" | s.operands == true},
		),
		"min": object.get(s, "min_operands", 0),
		"req": {r | some r in req},
		"env_set": object.union(object.get(h, "env_set", {}), object.get(s, "env_set", {})),
		"before": array.concat(object.get(h, "insert_before", []), object.get(s, "insert_before", [])),
		"after": array.concat(object.get(h, "insert_after", []), object.get(s, "insert_after", [])),
		"paths": object.get(s, "path_operands", true) != false,
		"pflags": {f | some f in array.concat(object.get(h, "path_flags", []), object.get(s, "path_flags", []))},
		"restrict": _restrict(s, h, prof),
		"allow": array.concat(object.get(h, "exec_allow", []), object.get(s, "exec_allow", [])),
		"inserts": _inserts(s, h, p),
		"restriction": _restriction(s, h, prof),
	},
	{"max": m | m := s.max_rest},
]) if {
	is_object(s)
	is_object(h)
	p := object.get(s, "prefix", [])
	is_array(p)
	is_number(object.get(s, "max_rest", 0))
	is_number(object.get(s, "min_operands", 0))
	req := object.get(s, "require", [])
	_is_collection(req)
	every o in [s, h] {
		_strings_or_absent(o, "insert_before")
		_strings_or_absent(o, "insert_after")
		_strings_or_absent(o, "path_flags")
		_strings_or_absent(o, "exec_allow")
		is_object(object.get(o, "env_set", {}))
		is_boolean(object.get(o, "exec_restrict", false))
	}
	is_boolean(object.get(s, "path_operands", true))
}

# _inserts are a shape's forced arguments as the decision's exec.insert
# gives them (argv positions 1 and after the prefix); a constant of the
# shape, computed here once per bundle.
_inserts(s, h, p) := array.concat(
	[{"at": 1, "args": before} | before := array.concat(object.get(h, "insert_before", []), object.get(s, "insert_before", [])); count(before) > 0],
	[{"at": count(p) + 1, "args": after} | after := array.concat(object.get(h, "insert_after", []), object.get(s, "insert_after", [])); count(after) > 0],
)

# _restriction is a shape's exec restriction as the decision gives it, {}
# when the shape does not restrict.
_restriction(s, h, prof) := {"exec_restrict": true, "exec_allow": sort({a | some a in array.concat(object.get(h, "exec_allow", []), object.get(s, "exec_allow", []))})} if {
	_restrict(s, h, prof)
} else := {}

# _strings_or_absent holds when o[k] is absent or an array of non-empty strings.
_strings_or_absent(o, k) if not _present(o, k)

_strings_or_absent(o, k) if {
	is_array(o[k])
	every v in o[k] {
		is_string(v)
		v != ""
	}
}

_restrict(s, h, prof) := v if {
	v := s.exec_restrict
	is_boolean(v)
} else := v if {
	v := h.exec_restrict
	is_boolean(v)
} else := object.get(prof, "exec_restrict", false) == true

_is_collection(x) if is_array(x)

_is_collection(x) if is_set(x)

_is_collection(x) if is_object(x)

_is_true(x) if {
	x == true
} else := false
