package portcullis.tests

import data.portcullis
import data.portcullis.index

# Every shape of the shipped passive profile, with one call it allows, the
# rule id it is known by, and the Exec plan and env the decision must carry:
# the hardening that makes it safe in a hostile working tree. The test
# below checks this table against the compiled profile, so a shape added to
# data.json without a case here fails.

_py_before := ["-I", "-X", "pycache_prefix=${HOME}/.cache/pycache"]

_go_env := {"GOTOOLCHAIN": "local", "GOPROXY": "off", "GOFLAGS": "-mod=readonly", "GOWORK": "off", "GOENV": "off", "CGO_ENABLED": "0"}

_git_env := {
	"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_TERMINAL_PROMPT": "0",
	"GIT_PAGER": "cat", "GIT_OPTIONAL_LOCKS": "0", "GIT_CONFIG_COUNT": "9",
	"GIT_CONFIG_KEY_0": "core.fsmonitor", "GIT_CONFIG_VALUE_0": "false",
	"GIT_CONFIG_KEY_1": "core.hooksPath", "GIT_CONFIG_VALUE_1": "/dev/null",
	"GIT_CONFIG_KEY_2": "safe.directory", "GIT_CONFIG_VALUE_2": "*",
	"GIT_CONFIG_KEY_3": "safe.bareRepository", "GIT_CONFIG_VALUE_3": "explicit",
	"GIT_CONFIG_KEY_4": "core.pager", "GIT_CONFIG_VALUE_4": "cat",
	"GIT_CONFIG_KEY_5": "log.showSignature", "GIT_CONFIG_VALUE_5": "false",
	"GIT_CONFIG_KEY_6": "gpg.program", "GIT_CONFIG_VALUE_6": "/bin/false",
	"GIT_CONFIG_KEY_7": "gpg.ssh.program", "GIT_CONFIG_VALUE_7": "/bin/false",
	"GIT_CONFIG_KEY_8": "gpg.x509.program", "GIT_CONFIG_VALUE_8": "/bin/false",
}

_git_allow := ["/usr/lib/git-core", "/usr/libexec/git-core"]

_npm_env := {"NPM_CONFIG_UPDATE_NOTIFIER": "false", "NPM_CONFIG_USERCONFIG": "/dev/null"}

_restricted(allow) := {"exec_restrict": true, "exec_allow": allow}

# [rule id, argv, base, exec plan, env.set]
_shape_cases := [
	["exec.shape.python3.--version", ["/usr/bin/python3", "--version"], "python3", object.union({"path_args": [], "insert": [{"at": 1, "args": _py_before}]}, _restricted([])), {}],
	["exec.shape.python3.-V", ["/usr/bin/python3.11", "-V"], "python3.11", object.union({"path_args": [], "insert": [{"at": 1, "args": _py_before}]}, _restricted([])), {}],
	["exec.shape.python3.-m.py_compile", ["/usr/bin/python3.11", "-m", "py_compile", "-q", "a.py", "pkg/b.py"], "python3.11", object.union({"path_args": [{"index": 4}, {"index": 5}], "insert": [{"at": 1, "args": _py_before}]}, _restricted([])), {}],
	["exec.shape.node.--version", ["/usr/bin/node", "--version"], "node", object.union({"path_args": []}, _restricted([])), {}],
	["exec.shape.node.-v", ["/usr/bin/node", "-v"], "node", object.union({"path_args": []}, _restricted([])), {}],
	["exec.shape.npm.--version", ["/usr/bin/npm", "--version"], "npm", object.union({"path_args": []}, _restricted([])), _npm_env],
	["exec.shape.ruby.--version", ["/usr/bin/ruby", "--version"], "ruby", object.union({"path_args": [], "insert": [{"at": 1, "args": ["--disable=gems"]}]}, _restricted([])), {}],
	["exec.shape.ruby.-v", ["/usr/bin/ruby", "-v"], "ruby", object.union({"path_args": [], "insert": [{"at": 1, "args": ["--disable=gems"]}]}, _restricted([])), {}],
	["exec.shape.go.version", ["/usr/local/go/bin/go", "version"], "go", object.union({"path_args": []}, _restricted(["../pkg/tool"])), _go_env],
	["exec.shape.go.vet", ["/usr/local/go/bin/go", "vet", "./..."], "go", object.union({"path_args": [{"index": 2}]}, _restricted(["../pkg/tool"])), _go_env],
	["exec.shape.gofmt", ["/usr/local/go/bin/gofmt", "-l", "-d", "main.go", "pkg"], "gofmt", object.union({"path_args": [{"index": 3}, {"index": 4}]}, _restricted([])), {}],
	["exec.shape.ruff.--version", ["/usr/local/bin/ruff", "--version"], "ruff", object.union({"path_args": []}, _restricted([])), {}],
	["exec.shape.ruff.check", ["/usr/local/bin/ruff", "check", "--select=E,F", "src"], "ruff", object.union({"path_args": [{"index": 3}], "insert": [{"at": 2, "args": ["--isolated", "--no-cache"]}]}, _restricted([])), {}],
	["exec.shape.mypy.--version", ["/usr/local/bin/mypy", "--version"], "mypy", object.union({"path_args": [], "insert": [{"at": 1, "args": ["--config-file=", "--cache-dir=/dev/null"]}]}, _restricted([])), {}],
	["exec.shape.mypy", ["/usr/local/bin/mypy", "--strict", "pkg", "a.py"], "mypy", object.union({"path_args": [{"index": 2}, {"index": 3}], "insert": [{"at": 1, "args": ["--config-file=", "--cache-dir=/dev/null"]}]}, _restricted([])), {}],
	["exec.shape.pyflakes.--version", ["/usr/bin/pyflakes", "--version"], "pyflakes", object.union({"path_args": []}, _restricted([])), {}],
	["exec.shape.pyflakes", ["/usr/bin/pyflakes", "a.py"], "pyflakes", object.union({"path_args": [{"index": 1}]}, _restricted([])), {}],
	["exec.shape.ls.--version", ["/usr/bin/ls", "--version"], "ls", object.union({"path_args": []}, _restricted([])), {}],
	["exec.shape.ls", ["/usr/bin/ls", "-la", "/srv", "sub"], "ls", object.union({"path_args": [{"index": 2}, {"index": 3}]}, _restricted([])), {}],
	["exec.shape.cat.--version", ["/usr/bin/cat", "--version"], "cat", object.union({"path_args": []}, _restricted([])), {}],
	["exec.shape.cat", ["/usr/bin/cat", "-n", "f.txt", "--", "g.txt"], "cat", object.union({"path_args": [{"index": 2}, {"index": 4}]}, _restricted([])), {}],
	["exec.shape.head.--version", ["/usr/bin/head", "--version"], "head", object.union({"path_args": []}, _restricted([])), {}],
	["exec.shape.head", ["/usr/bin/head", "-n", "5", "f.txt"], "head", object.union({"path_args": [{"index": 2}, {"index": 3}]}, _restricted([])), {}],
	["exec.shape.tail.--version", ["/usr/bin/tail", "--version"], "tail", object.union({"path_args": []}, _restricted([])), {}],
	["exec.shape.tail", ["/usr/bin/tail", "-20", "f.txt"], "tail", object.union({"path_args": [{"index": 2}]}, _restricted([])), {}],
	["exec.shape.wc.--version", ["/usr/bin/wc", "--version"], "wc", object.union({"path_args": []}, _restricted([])), {}],
	["exec.shape.wc", ["/usr/bin/wc", "-l", "f.txt"], "wc", object.union({"path_args": [{"index": 2}]}, _restricted([])), {}],
	["exec.shape.echo", ["/usr/bin/echo", "/etc/shadow", "-n"], "echo", object.union({"path_args": []}, _restricted([])), {}],
	["exec.shape.uname.--version", ["/usr/bin/uname", "--version"], "uname", object.union({"path_args": []}, _restricted([])), {}],
	["exec.shape.uname", ["/usr/bin/uname", "-a"], "uname", object.union({"path_args": []}, _restricted([])), {}],
	["exec.shape.pwd", ["/usr/bin/pwd"], "pwd", object.union({"path_args": []}, _restricted([])), {}],
	["exec.shape.true", ["/usr/bin/true"], "true", object.union({"path_args": []}, _restricted([])), {}],
	["exec.shape.git.--version", ["/usr/bin/git", "--version"], "git", object.union({"path_args": []}, _restricted(_git_allow)), _git_env],
	["exec.shape.git.status", ["/usr/bin/git", "status", "--short", "src"], "git", object.union({"path_args": [{"index": 3}]}, _restricted(_git_allow)), _git_env],
	["exec.shape.git.log", ["/usr/bin/git", "log", "--oneline", "-n", "5", "--", "src"], "git", object.union({"path_args": [{"index": 4}, {"index": 6}]}, _restricted(_git_allow)), _git_env],
	["exec.shape.git.diff", ["/usr/bin/git", "diff", "--no-ext-diff", "--no-textconv", "a.txt", "/etc/shadow"], "git", object.union({"path_args": [{"index": 4}, {"index": 5}]}, _restricted(_git_allow)), _git_env],
]

# _passive_shape_ids are the rule ids of every shape the shipped passive
# profile compiles.
_passive_shape_ids contains s.id if {
	some _, c in index.profiles.passive.cands
	some s in c.none
}

_passive_shape_ids contains s.id if {
	some _, c in index.profiles.passive.cands
	some _, ss in c.by_first
	some s in ss
}

test_every_passive_shape_has_a_case if {
	{c[0] | some c in _shape_cases} == _passive_shape_ids
}

test_every_passive_shape_allows_its_case_with_its_hardening if {
	every c in _shape_cases {
		d := portcullis.decision with input as _exec(c[1], c[2])
		d.allow == true
		c[0] in d.rule_ids
		d.exec == c[3]
		d.env.set == c[4]
		f := portcullis.full_decision with input as _exec(c[1], c[2])
		f == d
	}
}

# Shapes that run code from the working tree, or that cannot be made
# safe there, are refused; the Exec tool description lists them.
test_passive_refusals if {
	cases := [
		[["/usr/bin/python3", "-c", "import os"], "python3"],
		[["/usr/bin/python3", "setup.py"], "python3"],
		[["/usr/bin/python3", "-m", "pytest"], "python3"],
		[["/usr/bin/python3", "-m", "py_compile", "--help"], "python3"],
		[["/usr/bin/python3", "-I", "-m", "py_compile", "a.py"], "python3"],
		[["/usr/bin/node", "x.js"], "node"],
		[["/usr/bin/node", "x.js", "--help"], "node"],
		[["/usr/bin/node", "-e", "1"], "node"],
		[["/usr/bin/npm", "install"], "npm"],
		[["/usr/bin/npm", "test"], "npm"],
		[["/usr/bin/npx", "--version"], "npx"],
		[["/usr/bin/ruby", "-c", "a.rb"], "ruby"],
		[["/usr/bin/ruby", "a.rb", "--help"], "ruby"],
		[["/usr/bin/rubocop", "a.rb"], "rubocop"],
		[["/usr/bin/bundle", "exec", "rubocop"], "bundle"],
		[["/usr/bin/bundle", "--version"], "bundle"],
		[["/usr/local/go/bin/go", "run", "."], "go"],
		[["/usr/local/go/bin/go", "test", "./..."], "go"],
		[["/usr/local/go/bin/go", "generate", "./..."], "go"],
		[["/usr/local/go/bin/go", "vet", "-vettool=/tmp/x", "./..."], "go"],
		[["/usr/local/go/bin/go", "version", "-m", "x"], "go"],
		[["/usr/local/go/bin/gofmt", "-w", "a.go"], "gofmt"],
		[["/usr/local/go/bin/gofmt", "-r", "a -> b", "a.go"], "gofmt"],
		[["/usr/local/bin/ruff", "check", "--fix", "."], "ruff"],
		[["/usr/local/bin/ruff", "check", "--config=ruff.toml", "."], "ruff"],
		[["/usr/local/bin/ruff", "format", "."], "ruff"],
		[["/usr/local/bin/mypy", "--config-file=evil.ini", "a.py"], "mypy"],
		[["/usr/local/bin/mypy", "--python-executable=/tmp/py", "a.py"], "mypy"],
		[["/usr/local/bin/mypy", "-m", "pkg"], "mypy"],
		[["/usr/bin/git", "-c", "core.fsmonitor=x", "status"], "git"],
		[["/usr/bin/git", "log", "-p"], "git"],
		[["/usr/bin/git", "diff", "--no-ext-diff"], "git"],
		[["/usr/bin/git", "commit", "-m", "x"], "git"],
		[["/usr/bin/git", "--version", "--exec-path=/tmp"], "git"],
		[["/usr/bin/bash", "--version"], "bash"],
		[["/usr/bin/uname", "x"], "uname"],
		[["/usr/bin/cat", "-"], "cat"],
	]
	every c in cases {
		d := portcullis.decision with input as _exec(c[0], c[1])
		d.allow == false
		d.rule_ids == ["exec.shape_mismatch"]
	}
}

test_refusal_hints_name_the_reason if {
	d := portcullis.decision with input as _exec(["/usr/bin/ruby", "-c", "a.rb"], "ruby")
	d.reasons == ["argv shape not allowed by profile passive: ruby -c a.rb (ruby -c is refused: Ruby applies the script's own #! switches (-r loads code) before the syntax check)"]
	b := portcullis.decision with input as _exec(["/usr/bin/bundle", "exec", "rubocop"], "bundle")
	b.reasons == ["argv shape not allowed by profile passive: bundle exec rubocop (bundle is refused: it evaluates the Gemfile (Ruby code) and may switch itself to another Bundler version)"]
}

# A caller cannot add its own value for a variable the shape forces, even
# under a profile that takes caller env.
test_forced_env_cannot_be_overridden if {
	profiles := {"passive": {"caller_env": true, "argv0_dirs": ["/usr/local/go/bin"], "harden": {"go": {"env_set": {"GOTOOLCHAIN": "local"}}}, "programs": {"go": [{"prefix": ["version"], "max_rest": 0}]}}}
	principals := {"agent-alpha": {"tools": {"Exec": {"profile": "custom"}}}}
	custom := json.patch(profiles, [{"op": "move", "from": "/passive", "path": "/custom"}])
	inp := _with_env(_exec(["/usr/local/go/bin/go", "version"], "go"), {"gotoolchain": "auto"})
	d := portcullis.decision with input as inp
		with data.portcullis.config.exec.profiles as custom
		with data.portcullis.config.principals as principals
	d.allow == false
	"exec.env_forced" in d.rule_ids
}

# Hardening applies to every shape of the program, those for any program
# ("*") included, and a shape cannot shed it.
test_harden_applies_to_star_shapes if {
	profiles := {"passive": {
		"argv0_dirs": ["/usr/bin"],
		"harden": {"git": {"env_set": {"G": "1"}, "insert_before": ["--no-pager"], "exec_restrict": true}},
		"programs": {"*": [{"prefix": ["--help"], "max_rest": 0}]},
	}}
	d := portcullis.decision with input as _exec(["/usr/bin/git", "--help"], "git") with data.portcullis.config.exec.profiles as profiles
	d.allow == true
	d.env.set == {"G": "1"}
	d.exec == {"path_args": [], "insert": [{"at": 1, "args": ["--no-pager"]}], "exec_restrict": true, "exec_allow": []}
	o := portcullis.decision with input as _exec(["/usr/bin/ls", "--help"], "ls") with data.portcullis.config.exec.profiles as profiles
	o.allow == true
	o.exec == {"path_args": []}
}

test_malformed_hardening_matches_nothing if {
	bad := [
		{"insert_before": "-I"},
		{"insert_before": [""]},
		{"insert_after": [1]},
		{"env_set": ["X=1"]},
		{"exec_restrict": "yes"},
		{"exec_allow": "/usr"},
		{"path_flags": "--config"},
		"not an object",
	]
	every h in bad {
		profiles := {"passive": {"argv0_dirs": ["/usr/bin"], "harden": {"cat": h}, "programs": {"cat": [{"operands": true}]}}}
		d := portcullis.decision with input as _exec(["/usr/bin/cat", "f"], "cat") with data.portcullis.config.exec.profiles as profiles
		d.allow == false
		s := portcullis.decision with input as _exec(["/usr/bin/cat", "f"], "cat")
			with data.portcullis.config.exec.profiles as {"passive": {"argv0_dirs": ["/usr/bin"], "programs": {"cat": [object.union({"operands": true}, _as_object(h))]}}}
		_malformed_shape_refused(h, s)
	}
}

_as_object(h) := h if {
	is_object(h)
} else := {}

_malformed_shape_refused(h, _) if not is_object(h)

_malformed_shape_refused(h, s) if {
	is_object(h)
	s.allow == false
}

# Path arguments: operands by default, everything after "--", the values
# of path_flags, never an echo operand, and the union over matched shapes.
test_path_args if {
	profiles := {"passive": {"argv0_dirs": ["/usr/bin"], "programs": {
		"tool": [{"operands": true, "flags": "--config=.*|--name=.*|-v|--", "path_flags": ["--config"]}],
		"note": [{"operands": true, "path_operands": false, "flags": "--"}],
	}}}
	cases := [
		[["/usr/bin/tool", "a", "--config=b", "--name=c", "-v", "--", "-v", "--config=e"], "tool", [{"index": 1}, {"index": 2, "value": true}, {"index": 6}, {"index": 7}]],
		[["/usr/bin/tool"], "tool", []],
		[["/usr/bin/note", "a", "--", "b"], "note", []],
	]
	every c in cases {
		d := portcullis.decision with input as _exec(c[0], c[1]) with data.portcullis.config.exec.profiles as profiles
		d.allow == true
		d.exec.path_args == c[2]
		f := portcullis.full_decision with input as _exec(c[0], c[1]) with data.portcullis.config.exec.profiles as profiles
		f == d
	}
}

# npm is a script under /usr/lib/node_modules; its real name is an alias.
test_npm_by_its_real_path if {
	d := portcullis.decision with input as _exec(["/usr/lib/node_modules/npm/bin/npm-cli.js", "--version"], "npm-cli.js")
	d.allow == true
	d.env.set == _npm_env
	n := portcullis.decision with input as _exec(["/usr/lib/node_modules/npm/bin/npx-cli.js", "--version"], "npx-cli.js")
	n.allow == false
}

test_full_profile_has_no_exec_plan if {
	d := portcullis.decision with input as _exec(["/usr/bin/bash", "-c", "make"], "bash")
		with data.portcullis.config.principals as _full
	d.allow == true
	not d.exec
}

test_shipped_limits_leave_cpu_to_the_timeout if {
	d := portcullis.decision with input as _exec(["/usr/bin/true"], "true")
	d.limits == {"timeout_s": 60, "memory_bytes": 536870912, "fsize_bytes": 67108864, "nofile": 256, "max_output_bytes": 262144}
}

# The shortcut of _path_args agrees with the general computation.
test_path_args_shortcut_agrees if {
	every c in _shape_cases {
		inp := _exec(c[1], c[2])
		args := array.slice(c[1], 1, count(c[1]))
		some s in data.portcullis.exec._matched with input as inp
		data.portcullis.exec._path_args(s, args) == sort(data.portcullis.exec._shape_path_args(s, args))
	}
}
