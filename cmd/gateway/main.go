// Command gateway is the one Portcullis binary: the server and the operator,
// policy-author and auditor tools around it.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/portcullis/portcullis/backends/process"
	"github.com/portcullis/portcullis/backends/seatbelt"
)

const usage = `usage: gateway <command> [flags]

commands:
  serve [--dev] [--config FILE] [--listen ADDR]   run the gateway
  migrate [--config FILE]                         apply evidence store migrations
  doctor [--config FILE]                          check store, migrations, sandbox and policy
  keys hash KEY|-                                 print the SHA-256 of an API key for the config
  keys signing-key -o FILE [--name N] [--force]    create an evidence checkpoint signing key (mode 0600)
                                                  and print its verifier key
  policy test [DIR|FILE] [--coverage] [--json]   run a bundle's Rego tests (with line coverage)
  policy eval --input FILE [--bundle B] [--explain]  evaluate a decision for an input document
  policy schema [TOOL]                            print the policy input JSON Schemas
  policy replay --config FILE RECEIPT_ID [--bundle B]  re-decide a receipt against its archived bundle
  bundle build DIR -o FILE.tar.gz [--signing-key KEY.pem --key-id ID] [--revision R]
  bundle sign DIR|FILE.tar.gz --signing-key KEY.pem [--key-id ID] [-o FILE]
  bundle inspect DIR|FILE.tar.gz [--verification-key PUB.pem] [--key-id ID] [--json]
  evidence query [--config FILE] [filters]        list receipts as JSON lines
  evidence export [--config FILE] [--format jsonl|csv] [filters]  stream receipts
  evidence verify [--config FILE] [--key K] [--checkpoint F]...   check chains, tree, checkpoints
  evidence retain --config FILE [--dry-run]       drop expired months after a retention event;
                                                  exit 3 when legal holds kept some months
  evidence hold place --config FILE --since T [--until T] --reason R   place a legal hold
  evidence hold list --config FILE [--active] [--json]                 list legal holds
  evidence hold release ID --config FILE --reason R                    release a legal hold
  approvals list [--status S] [--json]            parked calls (REST: --url or PORTCULLIS_URL,
                                                  the key in PORTCULLIS_API_KEY)
  approvals approve|reject ID [--reason R]        decide a parked call (role approver or admin)

Configuration: --config FILE or PORTCULLIS_CONFIG; every key also as PORTCULLIS_<KEY>.
`

func main() {
	// The Exec process backend re-executes this binary to apply rlimits
	// before the target program starts; that must happen before anything.
	process.MaybeRunHelper()
	// On macOS the seatbelt runner re-executes this binary to set a
	// call's limits before sandbox-exec starts.
	seatbelt.MaybeRunHelper()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = cmdServe(ctx, args[1:], stdout, stderr)
	case "migrate":
		err = cmdMigrate(ctx, args[1:], stdout)
	case "doctor":
		err = cmdDoctor(ctx, args[1:], stdout)
	case "keys":
		err = cmdKeys(args[1:], os.Stdin, stdout, stderr)
	case "policy":
		err = cmdPolicy(ctx, args[1:], stdout)
	case "bundle":
		err = cmdBundle(args[1:], stdout)
	case "evidence":
		err = cmdEvidence(ctx, args[1:], stdout)
	case "approvals":
		err = cmdApprovals(ctx, args[1:], stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "gateway: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "gateway %s: %v\n", args[0], err)
		var ec interface{ ExitCode() int }
		if errors.As(err, &ec) {
			return ec.ExitCode()
		}
		return 1
	}
	return 0
}
