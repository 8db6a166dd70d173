package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/portcullis/portcullis/cmd/gateway/internal/config"
)

// Exit codes of every command: 0 done, 1 a runtime failure (the error is
// printed), 2 a usage error (unknown command or flag, missing or extra
// arguments). A few commands add their own (evidence retain: 3 when legal
// holds kept months), through an error with an ExitCode method.
const (
	exitFailure = 1
	exitUsage   = 2
)

// usageError is a command line the command cannot run: exit 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// run executes the command line args (without the program name) and returns
// the process's exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCmd(stderr)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", cmd.CommandPath(), err, cmd.CommandPath())
		return exitUsage
	}
	fmt.Fprintf(stderr, "%s: %v\n", cmd.CommandPath(), err)
	var ec interface{ ExitCode() int }
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return exitFailure
}

// newRootCmd is the command tree. Every command answers -h/--help (exit 0);
// a group without its subcommand, an unknown subcommand, flag or argument
// count is a usage error (exit 2).
func newRootCmd(stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "gateway",
		Short: "Portcullis: a policy-as-code governance gateway for AI agents' tool calls",
		Long: `gateway is the one Portcullis binary: the server and the operator,
policy-author and auditor tools around it.

Configuration: --config FILE or PORTCULLIS_CONFIG; every key also as
PORTCULLIS_<KEY> (docs/configuration.md). An unknown PORTCULLIS_* variable is
reported with the nearest known name.`,
		Version:       versionString(),
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          groupArgs,
		RunE:          groupRun,
		// Every command but serve (which logs it) says which PORTCULLIS_*
		// variables it does not know.
		PersistentPreRun: func(c *cobra.Command, _ []string) {
			if c.Name() != "serve" {
				warnUnknownEnv(envWarner(stderr))
			}
		},
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	root.AddCommand(
		serveCmd(), migrateCmd(), doctorCmd(), keysCmd(),
		policyCmd(), bundleCmd(), evidenceCmd(), upstreamCmd(), approvalsCmd(), versionCmd(),
	)
	root.CompletionOptions.DisableDefaultCmd = true
	return root
}

// group is a command that only holds subcommands.
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short, Args: groupArgs, RunE: groupRun}
	c.AddCommand(subs...)
	return c
}

// groupArgs lets groupRun word the error for a group run without a known
// subcommand.
func groupArgs(*cobra.Command, []string) error { return nil }

func groupRun(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return usageErrorf("missing command (one of: %s)", strings.Join(subNames(c), ", "))
	}
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2
	}
	if s := c.SuggestionsFor(args[0]); len(s) > 0 {
		return usageErrorf("unknown command %q; did you mean %q?", args[0], s[0])
	}
	return usageErrorf("unknown command %q (one of: %s)", args[0], strings.Join(subNames(c), ", "))
}

func subNames(c *cobra.Command) []string {
	var out []string
	for _, s := range c.Commands() {
		if s.IsAvailableCommand() {
			out = append(out, s.Name())
		}
	}
	return out
}

// Positional argument checks, as usage errors.

func noArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("unexpected argument %q", args[0])
	}
	return nil
}

func exactArgs(n int) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErrorf("want %d argument(s) (%s), got %d", n, c.Use, len(args))
		}
		return nil
	}
}

func maxArgs(n int) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) > n {
			return usageErrorf("want at most %d argument(s) (%s), got %d", n, c.Use, len(args))
		}
		return nil
	}
}

// required is a usage error naming the flags that are missing.
func required(fs *pflag.FlagSet, names ...string) error {
	var missing []string
	for _, n := range names {
		if f := fs.Lookup(n); f != nil && f.Value.String() == "" {
			missing = append(missing, "--"+n)
		}
	}
	if len(missing) > 0 {
		return usageErrorf("missing %s", strings.Join(missing, ", "))
	}
	return nil
}

// warnUnknownEnv reports each PORTCULLIS_* variable the gateway does not
// read, with the known name nearest to it: a typo (PORTCULLIS_LISTN) would
// otherwise leave the default in force unnoticed. It warns and does not
// refuse: the prefix is shared with the SDKs' and the test suites' own
// variables, which may sit in the same environment.
func warnUnknownEnv(warn func(name, nearest string)) {
	for _, u := range config.UnknownEnv(os.Environ()) {
		warn(u.Name, u.Nearest)
	}
}

func envWarner(w io.Writer) func(name, nearest string) {
	return func(name, nearest string) {
		if nearest != "" {
			fmt.Fprintf(w, "gateway: warning: unknown environment variable %s ignored (did you mean %s?)\n", name, nearest)
			return
		}
		fmt.Fprintf(w, "gateway: warning: unknown environment variable %s ignored\n", name)
	}
}
