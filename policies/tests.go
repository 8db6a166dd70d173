package policies

import (
	"context"
	"fmt"
	"io/fs"
	"sort"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/cover"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/tester"
)

// TestResult is the outcome of one Rego test, for `gateway policy test`.
type TestResult struct {
	Package  string        `json:"package"`
	Name     string        `json:"name"`
	Pass     bool          `json:"pass"`
	Fail     string        `json:"fail,omitempty"`
	Duration time.Duration `json:"duration"`
}

// TestReport is a test run, with line coverage of the bundle's modules when
// it was asked for.
type TestReport struct {
	Tests    []TestResult  `json:"tests"`
	Coverage *cover.Report `json:"coverage,omitempty"`
}

// RunTests runs every test_ rule of the bundle in fsys against the bundle's
// own data, so policy authors check a bundle exactly as it will be loaded.
// The error is for a bundle that cannot be read or compiled; failing tests
// are results with Pass false.
func RunTests(ctx context.Context, fsys fs.FS) ([]TestResult, error) {
	r, err := RunTestsWithCoverage(ctx, fsys, false)
	return r.Tests, err
}

// RunTestsWithCoverage is RunTests that also reports which lines of the
// bundle's modules the tests evaluated, when coverage is set.
func RunTestsWithCoverage(ctx context.Context, fsys fs.FS, coverage bool) (TestReport, error) {
	files, err := readBundleFiles(fsys)
	if err != nil {
		return TestReport{}, fmt.Errorf("policy tests: %w", err)
	}
	b, err := parseBundle(withoutSignatures(files))
	if err != nil {
		return TestReport{}, fmt.Errorf("policy tests: %w", err)
	}
	return runTests(ctx, &b, coverage)
}

// runTests runs the tests of an already read bundle.
func runTests(ctx context.Context, b *bundle.Bundle, coverage bool) (TestReport, error) {
	store := inmem.NewWithOpts(inmem.OptRoundTripOnWrite(false))
	var rep TestReport
	var cov *cover.Cover
	err := storage.Txn(ctx, store, storage.WriteParams, func(txn storage.Transaction) error {
		runner := tester.NewRunner().
			SetCompiler(ast.NewCompiler().WithDefaultRegoVersion(ast.RegoV1).WithCapabilities(Capabilities())).
			SetStore(store).
			SetBundles(map[string]*bundle.Bundle{"policy": b}).
			SetTimeout(2 * time.Minute)
		if coverage {
			cov = cover.New()
			runner = runner.SetCoverageQueryTracer(cov)
		}
		ch, err := runner.RunTests(ctx, txn)
		if err != nil {
			return fmt.Errorf("run: %w", err)
		}
		for r := range ch {
			tr := TestResult{Package: r.Package, Name: r.Name, Pass: r.Pass(), Duration: r.Duration}
			switch {
			case r.Error != nil:
				tr.Fail = r.Error.Error()
			case r.Skip:
				tr.Fail = "skipped"
			case r.Fail:
				tr.Fail = "failed"
				if r.FailedAt != nil {
					tr.Fail = fmt.Sprintf("failed at %s: %s", r.FailedAt.Location, r.FailedAt)
				}
			}
			rep.Tests = append(rep.Tests, tr)
		}
		return nil
	})
	if err != nil {
		return TestReport{}, fmt.Errorf("policy tests: %w", err)
	}
	sort.Slice(rep.Tests, func(i, j int) bool {
		if rep.Tests[i].Package != rep.Tests[j].Package {
			return rep.Tests[i].Package < rep.Tests[j].Package
		}
		return rep.Tests[i].Name < rep.Tests[j].Name
	})
	if cov != nil {
		modules := map[string]*ast.Module{}
		for _, m := range b.Modules {
			modules[m.Path] = m.Parsed
		}
		r := cov.Report(modules)
		rep.Coverage = &r
	}
	return rep, nil
}

// failedTests names the failing tests of a run, at most a few, for an
// activation error that fits a log line.
func failedTests(results []TestResult) []string {
	var out []string
	for _, r := range results {
		if r.Pass {
			continue
		}
		if len(out) == 5 {
			out = append(out, "...")
			break
		}
		out = append(out, fmt.Sprintf("%s.%s: %s", r.Package, r.Name, r.Fail))
	}
	return out
}
