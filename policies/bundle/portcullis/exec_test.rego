package portcullis.tests

import data.portcullis

_with_env(inp, env) := object.union(inp, {"args": {"env": env}, "resolved": {"env_names": sort(object.keys(env))}})

_full := {"agent-alpha": {"tools": {"Exec": {"profile": "full"}}}}

test_passive_allowed_shapes if {
	cases := [
		[["/usr/bin/echo", "hi", "-n"], "echo"],
		[["/usr/bin/git", "--version"], "git"],
		[["/usr/bin/python3.11", "--version"], "python3.11"],
		[["/usr/bin/python3.11", "-m", "py_compile", "a.py", "b.py"], "python3.11"],
		[["/usr/bin/python3", "-m", "py_compile", "a.py"], "python3"],
		[["/usr/local/go/bin/go", "vet", "./..."], "go"],
		[["/usr/local/go/bin/go", "vet"], "go"],
		[["/usr/local/go/bin/go", "version"], "go"],
		[["/usr/bin/ls", "-la", "/srv"], "ls"],
		[["/usr/bin/ls"], "ls"],
		[["/usr/bin/cat", "-n", "f.txt"], "cat"],
		[["/usr/bin/head", "-n", "5", "f.txt"], "head"],
		[["/usr/bin/tail", "-20", "f.txt"], "tail"],
		[["/usr/bin/wc", "-l", "f.txt"], "wc"],
		[["/usr/bin/git", "status", "--short"], "git"],
		[["/usr/bin/git", "log", "--oneline", "-n", "5"], "git"],
		[["/usr/bin/git", "diff", "--no-ext-diff", "--no-textconv", "--stat", "HEAD~1"], "git"],
		[["/usr/bin/pwd"], "pwd"],
	]
	every c in cases {
		d := portcullis.decision with input as _exec(c[0], c[1])
		d.allow == true
	}
}

test_passive_denied_shapes if {
	cases := [
		[["/usr/bin/bash", "-c", "id"], "bash"],
		[["/usr/bin/python3.11", "-c", "print(1)"], "python3.11"],
		[["/usr/bin/python3.11", "-m", "py_compile"], "python3.11"],
		[["/usr/bin/python3.11", "-m", "http.server"], "python3.11"],
		[["/usr/bin/python3x", "-m", "py_compile", "a.py"], "python3x"],
		[["/usr/local/go/bin/go", "run", "."], "go"],
		[["/usr/local/go/bin/go", "vet", "-vettool=/tmp/x", "./..."], "go"],
		[["/usr/bin/git", "-c", "core.pager=sh", "log"], "git"],
		[["/usr/bin/git", "log", "--output=/tmp/x"], "git"],
		[["/usr/bin/git", "log", "-p"], "git"],
		[["/usr/bin/git", "diff"], "git"],
		[["/usr/bin/git", "diff", "--ext-diff", "--no-ext-diff", "--no-textconv"], "git"],
		[["/usr/bin/git", "push"], "git"],
		[["/usr/bin/tail", "-f", "log"], "tail"],
		[["/usr/bin/ls", "--hyperlink=always"], "ls"],
		[["/usr/bin/bash", "--version"], "bash"],
		[["/usr/bin/git", "--version", "extra"], "git"],
		[["/usr/bin/rm", "-rf", "/"], "rm"],
		[["/usr/bin/pwd", "-P"], "pwd"],
	]
	every c in cases {
		d := portcullis.decision with input as _exec(c[0], c[1])
		d.allow == false
		some r in d.reasons
		startswith(r, "argv shape not allowed by profile passive: ")
	}
}

test_passive_reason_names_argv if {
	d := portcullis.decision with input as _exec(["/usr/bin/bash", "-c", "id"], "bash")
	d.reasons == ["argv shape not allowed by profile passive: bash -c id"]
}

test_passive_reason_hint if {
	d := portcullis.decision with input as _exec(["/usr/bin/git", "diff"], "git")
	d.reasons == ["argv shape not allowed by profile passive: git diff (git diff requires --no-ext-diff and --no-textconv)"]
}

test_passive_matches_real_basename_not_caller_name if {
	# argv[0] says echo but its real path is bash: the real one decides
	inp := object.union(_exec(["/usr/bin/echo", "-c", "id"], "bash"), {"resolved": {"argv0": "/usr/bin/bash"}})
	d := portcullis.decision with input as inp
	d.allow == false
}

test_passive_program_outside_dirs_denied if {
	d := portcullis.decision with input as _exec(["/srv/work/echo", "hi"], "echo")
	d.allow == false
	d.reasons == ["program /srv/work/echo not allowed by profile passive: not under /usr/bin, /usr/local/bin, /usr/local/go/bin, /usr/lib/go/bin, /usr/lib/node_modules/npm/bin"]
}

test_passive_dir_prefix_is_a_path_prefix if {
	d := portcullis.decision with input as _exec(["/usr/binx/echo", "hi"], "echo")
	d.allow == false
}

test_passive_refuses_any_caller_env if {
	d := portcullis.decision with input as _with_env(_exec(["/usr/bin/echo", "hi"], "echo"), {"FOO": "1", "BAR": "2"})
	d.allow == false
	d.reasons == ["caller env not allowed by profile passive: BAR, FOO"]
}

test_passive_refuses_caller_env_even_if_data_allows if {
	profiles := {"passive": {"caller_env": true, "any_argv": true}}
	d := portcullis.decision with input as _with_env(_exec(["/usr/bin/echo", "hi"], "echo"), {"FOO": "1"})
		with data.portcullis.config.exec.profiles as profiles
	d.allow == false
}

test_passive_env_names_from_resolved_only if {
	inp := object.union(_exec(["/usr/bin/echo", "hi"], "echo"), {"resolved": {"env_names": ["FOO"]}})
	d := portcullis.decision with input as inp
	d.allow == false
}

test_full_any_argv_and_caller_env if {
	d := portcullis.decision with input as _with_env(_exec(["/usr/bin/bash", "-c", "make"], "bash"), {"CI": "1"})
		with data.portcullis.config.principals as _full
	d.allow == true
	d.reasons == []
}

test_deny_list_under_every_profile if {
	names := ["LD_PRELOAD", "ld_preload", "DYLD_INSERT_LIBRARIES", "BASH_ENV", "ENV", "GIT_CONFIG_GLOBAL", "GIT_CONFIG", "GIT_EXEC_PATH", "GIT_SSH_COMMAND", "PYTHONSTARTUP", "PYTHONPATH", "NODE_OPTIONS", "PERL5OPT", "RUBYOPT", "BASH_FUNC_ls%%", "GLIBC_TUNABLES", "PATH"]
	every n in names {
		d := portcullis.decision with input as _with_env(_exec(["/usr/bin/bash", "-c", "make"], "bash"), {n: "x"})
			with data.portcullis.config.principals as _full
		d.allow == false
		d.reasons == [sprintf("caller env %s not allowed: it can change what the program loads or runs", [n])]
	}
}

test_deny_list_extended_by_data if {
	d := portcullis.decision with input as _with_env(_exec(["/usr/bin/bash", "-c", "make"], "bash"), {"MY_HOOK": "x"})
		with data.portcullis.config.principals as _full
		with data.portcullis.config.exec.env_deny as {"names": ["my_hook"]}
	d.allow == false
}

test_deny_list_cannot_be_removed_by_data if {
	d := portcullis.decision with input as _with_env(_exec(["/usr/bin/bash", "-c", "make"], "bash"), {"LD_PRELOAD": "x"})
		with data.portcullis.config.principals as _full
		with data.portcullis.config.exec.env_deny as {"names": [], "prefixes": []}
	d.allow == false
}

test_env_must_be_string_object if {
	inp := object.union(_exec(["/usr/bin/bash", "-c", "make"], "bash"), {"args": {"env": {"CI": 1}}})
	d := portcullis.decision with input as inp with data.portcullis.config.principals as _full
	d.allow == false
	"env must be an object of string values" in d.reasons
}

test_unknown_profile_denied if {
	principals := {"agent-alpha": {"tools": {"Exec": {"profile": "yolo"}}}}
	d := portcullis.decision with input as _exec(["/usr/bin/echo", "hi"], "echo")
		with data.portcullis.config.principals as principals
	d.allow == false
	d.reasons == ["unknown exec profile yolo"]
}

test_missing_profile_defaults_to_passive if {
	roles := {"agent": {"tools": {"Exec": {"fs": [{"path": "/usr", "mode": "r"}]}}}}
	d1 := portcullis.decision with input as _exec(["/usr/bin/echo", "hi"], "echo") with data.portcullis.config.roles as roles
	d1.allow == true
	d2 := portcullis.decision with input as _exec(["/usr/bin/bash", "-c", "id"], "bash") with data.portcullis.config.roles as roles
	d2.allow == false
}

test_bad_argv_denied if {
	every argv in [[], ["/usr/bin/echo", ""], ["/usr/bin/echo", 5], "echo hi"] {
		inp := object.union(_exec(["/usr/bin/echo"], "echo"), {"args": {"argv": argv}})
		d := portcullis.decision with input as inp
		d.allow == false
		"argv must be a non-empty array of non-empty strings" in d.reasons
	}
}

test_unresolved_argv0_denied if {
	inp := json.remove(_exec(["/usr/bin/echo", "hi"], "echo"), ["resolved/argv0"])
	d := portcullis.decision with input as inp with data.portcullis.config.principals as _full
	d.allow == false
	d.reasons == ["Exec input not resolved by the gateway: resolved.argv0 missing"]
}

test_git_shapes_set_hardening_env if {
	d := portcullis.decision with input as _exec(["/usr/bin/git", "status"], "git")
	d.allow == true
	d.env.set.GIT_CONFIG_KEY_0 == "core.fsmonitor"
	d.env.set.GIT_CONFIG_VALUE_0 == "false"
	d.env.set.GIT_CONFIG_NOSYSTEM == "1"
	e := portcullis.decision with input as _exec(["/usr/bin/echo", "hi"], "echo")
	e.env.set == {}
}

test_go_shapes_set_toolchain_env if {
	d := portcullis.decision with input as _exec(["/usr/local/go/bin/go", "vet", "./..."], "go")
	d.env.set == {"GOTOOLCHAIN": "local", "GOPROXY": "off", "GOFLAGS": "-mod=readonly", "GOWORK": "off", "GOENV": "off", "CGO_ENABLED": "0"}
}
