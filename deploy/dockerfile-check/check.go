// Command dockerfile-check lints the project's Dockerfile where no Docker
// engine is at hand: it parses it with BuildKit's own Dockerfile frontend
// (the parser and instruction parser `docker build` uses, with BuildKit's
// lint rules, as `docker build --check` runs them), then holds it to what
// the deployment docs promise: a multi-stage build whose runtime stage
// installs bubblewrap, ships the gateway with its exec helper beside it,
// runs as a non-root user and has a HEALTHCHECK on /healthz.
//
//	go run . ../../Dockerfile
package main

import (
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: dockerfile-check DOCKERFILE...")
		os.Exit(2)
	}
	failed := false
	for _, name := range os.Args[1:] {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		problems := Check(f)
		f.Close()
		for _, p := range problems {
			fmt.Printf("%s: %s\n", name, p)
		}
		if len(problems) > 0 {
			failed = true
		} else {
			fmt.Printf("%s: ok\n", name)
		}
	}
	if failed {
		os.Exit(1)
	}
}

// Check returns every problem found in the Dockerfile r; none means it
// passes.
func Check(r io.Reader) []string {
	var problems []string
	add := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }

	res, err := parser.Parse(r)
	if err != nil {
		return []string{"does not parse: " + err.Error()}
	}
	for _, w := range res.Warnings {
		add("parser warning: %s", w.Short)
	}
	lint := linter.New(&linter.Config{Warn: func(rule, _, _, msg string, loc []parser.Range) {
		line := 0
		if len(loc) > 0 {
			line = loc[0].Start.Line
		}
		add("line %d: lint %s: %s", line, rule, msg)
	}})
	stages, _, err := instructions.Parse(res.AST, lint)
	if err != nil {
		return append(problems, "instructions: "+err.Error())
	}
	if len(stages) < 2 {
		return append(problems, fmt.Sprintf("want a multi-stage build (a builder and a runtime stage), got %d stage(s)", len(stages)))
	}
	final := stages[len(stages)-1]
	if strings.Contains(final.BaseName, "golang") {
		add("the runtime stage is based on %s: it should not carry the Go toolchain", final.BaseName)
	}
	var (
		bubblewrap, healthcheck, entrypoint bool
		user                                string
		copied                              = map[string]string{} // binary -> destination dir
	)
	for _, cmd := range final.Commands {
		switch c := cmd.(type) {
		case *instructions.RunCommand:
			line := strings.Join(c.CmdLine, " ")
			if strings.Contains(line, "apt-get install") && strings.Contains(line, "bubblewrap") {
				bubblewrap = true
			}
		case *instructions.CopyCommand:
			if c.From == "" {
				continue
			}
			for _, src := range c.SourcePaths {
				copied[path.Base(src)] = c.DestPath
			}
		case *instructions.UserCommand:
			user = c.User
		case *instructions.HealthCheckCommand:
			hc := c.Health
			switch {
			case hc == nil || len(hc.Test) == 0 || hc.Test[0] == "NONE":
				add("HEALTHCHECK NONE: the runtime stage needs a health check")
			case !strings.Contains(strings.Join(hc.Test, " "), "/healthz"):
				add("HEALTHCHECK does not probe /healthz: %q", hc.Test)
			default:
				healthcheck = true
			}
		case *instructions.EntrypointCommand:
			entrypoint = slices.ContainsFunc(c.CmdLine, func(s string) bool { return path.Base(s) == "gateway" })
		}
	}
	if !bubblewrap {
		add("the runtime stage does not apt-get install bubblewrap (the sandbox)")
	}
	gw, okGw := copied["gateway"]
	helper, okHelper := copied["portcullis-exec-helper"]
	switch {
	case !okGw || !okHelper:
		add("the runtime stage must copy both gateway and portcullis-exec-helper from the build stage (got %v)", copied)
	case gw != helper:
		add("gateway (%s) and portcullis-exec-helper (%s) must sit in one directory: the gateway finds the helper beside itself", gw, helper)
	}
	u, _, _ := strings.Cut(user, ":")
	if u == "" || u == "0" || u == "root" {
		add("the runtime stage runs as root (USER %q): set a non-root USER; root is an explicit choice at run time", user)
	}
	if !healthcheck && !slices.ContainsFunc(problems, func(p string) bool { return strings.HasPrefix(p, "HEALTHCHECK") }) {
		add("the runtime stage has no HEALTHCHECK")
	}
	if !entrypoint {
		add("the ENTRYPOINT is not the gateway")
	}
	return problems
}
