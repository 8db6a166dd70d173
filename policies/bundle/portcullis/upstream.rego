# Portcullis upstream MCP tools. Rules for the tools of upstream MCP servers ("<upstream>.<tool>"). They
# are granted like any tool, by name, under config.roles or
# config.principals (e.g. roles.agent.tools["files.read_text_file"]).
# config.upstreams[NAME] adds rules for all of an upstream's tools:
#   read_only: true   only tools the upstream annotates readOnlyHint
#                     (input.resolved.upstream.annotations) are allowed;
#                     annotations are the server's own claim, so this
#                     narrows what a grant allows, never widens it.
# A stdio server's launch is decided with purpose "launch", tool
# "<upstream>" and principal role "upstream": grant it under
# config.roles.upstream.tools[NAME] with the fs, network, env and limits
# the server runs under.
package portcullis

import data.portcullis.config

# _upstream is input.resolved.upstream when the tool is an upstream's.
_upstream := u if {
	input.purpose in {"call", "dry_run", "list"}
	u := input.resolved.upstream
	is_object(u)
	is_string(u.name)
}

_upstream_read_only if config.upstreams[_upstream.name].read_only == true

_upstream_hinted_read_only if _upstream.annotations.readOnlyHint == true

# upstream_denials are the refusals config.upstreams adds.
upstream_denials contains {"rule": "upstream.read_only", "reason": sprintf("upstream %s is read-only: %s is not annotated readOnlyHint", [_upstream.name, _tool_text])} if {
	_upstream_read_only
	not _upstream_hinted_read_only
}

_upstream_denied if count(upstream_denials) > 0
