// Package policies holds the shipped Rego library (the default policy, its
// data and its tests, embedded) and the Engine that evaluates a policy bundle
// for every tool call. The engine fails closed: no policy, an evaluation
// error or an undefined decision never allows a call, and ill-typed decision
// fields fall back to the narrowest value.
//
// The shipped policy is data-driven: operators edit bundle/data.json, whose
// data.portcullis.config holds defaults.limits, roles[ROLE].tools[TOOL] and
// principals[ID].{tools, revoke} grants (fs, fs_add, network, env, limits,
// profile), and exec.{env_deny, profiles}. grants.rego documents how
// principal entries override role entries; exec.rego documents profiles;
// index.rego holds the views of the config that the engine evaluates once
// per loaded bundle (see IndexPackage) so a decision only looks them up.
// The Debian-style /bin, /lib and /lib64 are symlinks into /usr and the
// gateway matches real paths, so the agent role's read-only /usr grant
// covers them; on a system where they are real directories, add them.
package policies

import (
	"embed"
	"fmt"
	"io/fs"
)

// bundleFS is the shipped policy bundle; "all:" keeps the .manifest.
//
//go:embed all:bundle
var bundleFS embed.FS

// Shipped returns the default policy bundle, rooted at the bundle directory
// (.manifest, data.json, portcullis/*.rego), so `serve --dev` and operators
// starting from it need nothing on disk.
func Shipped() fs.FS {
	sub, err := fs.Sub(bundleFS, "bundle")
	if err != nil {
		// fs.Sub only fails on an invalid path, and "bundle" is a constant.
		panic(fmt.Sprintf("policies: shipped bundle: %v", err))
	}
	return sub
}
