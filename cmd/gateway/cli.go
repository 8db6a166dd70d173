package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/portcullis/portcullis/evidence"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/portcullis/portcullis/backends/bwrap"
	"github.com/portcullis/portcullis/evidence/postgres"
	"github.com/portcullis/portcullis/evidence/sqlite"
	"github.com/portcullis/portcullis/gateway/config"
)

func configFlag(fs *flag.FlagSet) *string {
	return fs.String("config", os.Getenv("PORTCULLIS_CONFIG"), "config file (YAML)")
}

// openConfiguredStore loads the config at path and opens its evidence store,
// for the operator commands that read evidence (query, export, replay).
func openConfiguredStore(ctx context.Context, path string) (evidence.Store, config.Config, error) {
	cfg, err := loadToolConfig(path)
	if err != nil {
		return nil, cfg, err
	}
	store, _, err := openStore(ctx, cfg)
	return store, cfg, err
}

// loadToolConfig loads the config for the operator commands, which need no
// principals.
func loadToolConfig(path string) (config.Config, error) {
	return config.Load(path, os.Environ())
}

func cmdMigrate(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	cfgPath := configFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadToolConfig(*cfgPath)
	if err != nil {
		return err
	}
	if cfg.DatabaseURL != "" {
		if err := postgres.Migrate(ctx, cfg.DatabaseURL); err != nil {
			return err
		}
		cur, latest, err := postgres.MigrationStatus(ctx, cfg.DatabaseURL)
		fmt.Fprintf(stdout, "postgres: schema version %d (latest %d)\n", cur, latest)
		return err
	}
	path, err := sqlitePath(cfg)
	if err != nil {
		return err
	}
	if err := sqlite.Migrate(ctx, path); err != nil {
		return err
	}
	cur, latest, err := sqlite.MigrationStatus(ctx, path)
	fmt.Fprintf(stdout, "sqlite %s: schema version %d (latest %d)\n", path, cur, latest)
	return err
}

func sqlitePath(cfg config.Config) (string, error) {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return "", fmt.Errorf("data_dir: %w", err)
	}
	return cfg.DataDir + "/evidence.db", nil
}

// cmdDoctor checks each part the gateway needs and says what is wrong.
func cmdDoctor(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	cfgPath := configFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	failures := 0
	report := func(ok bool, what, detail string) {
		mark := "ok  "
		if !ok {
			mark = "FAIL"
			failures++
		}
		fmt.Fprintf(stdout, "[%s] %-22s %s\n", mark, what, detail)
	}
	cfg, err := loadToolConfig(*cfgPath)
	report(err == nil, "config", errText(err, "valid"))
	if err != nil {
		return errors.New("config invalid")
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if cfg.DatabaseURL != "" {
		cur, latest, err := postgres.MigrationStatus(ctx, cfg.DatabaseURL)
		report(err == nil, "store (postgres)", errText(err, "reachable"))
		if err == nil {
			report(cur == latest, "migrations", fmt.Sprintf("schema %d of %d", cur, latest))
		}
	} else {
		path, err := sqlitePath(cfg)
		if err == nil {
			var cur, latest int64
			cur, latest, err = sqlite.MigrationStatus(ctx, path)
			if err == nil {
				report(cur == latest, "migrations", fmt.Sprintf("schema %d of %d (run gateway migrate or serve)", cur, latest))
			}
		}
		report(err == nil, "store (embedded)", errText(err, path))
	}
	// The policy is checked exactly as serve activates it: any source kind,
	// signature, schemas and the bundle's own tests.
	ps, err := openPolicy(ctx, cfg, slog.New(slog.DiscardHandler), describedTools(), nil)
	detail := ""
	if err == nil {
		info, _ := ps.engine.Info()
		detail = fmt.Sprintf("%s revision %s", cfg.Policy.Bundle, info.Revision)
	}
	report(err == nil, "policy", errText(err, detail))

	br := bwrap.New(bwrap.Options{}).Report(ctx)
	rb, _ := json.MarshalIndent(br, "       ", "  ")
	fmt.Fprintf(stdout, "[info] %-22s %s\n", "sandbox (bwrap)", rb)
	if cfg.Sandbox.Backend == "process" {
		fmt.Fprintf(stdout, "[info] %-22s process (sandbox.backend: process): rlimits only, no filesystem or network confinement\n", "exec backend")
		if cfg.Sandbox.Require {
			report(false, "sandbox", "sandbox.require is set with backend process: every Exec will be refused")
		}
	} else if perr := bwrap.New(bwrap.Options{}).Probe(ctx); perr != nil {
		fmt.Fprintf(stdout, "[info] %-22s bwrap unusable (%v): Exec falls back to the process backend unless sandbox.require\n", "exec backend", perr)
		if cfg.Sandbox.Backend == "bwrap" || cfg.Sandbox.Require {
			report(false, "sandbox", "sandbox.backend/require ask for bwrap but it does not work here")
		}
	} else {
		fmt.Fprintf(stdout, "[info] %-22s bwrap\n", "exec backend")
	}
	fmt.Fprintf(stdout, "[info] %-22s %s (require: %v)\n", "sandbox.backend", cfg.Sandbox.Backend, cfg.Sandbox.Require)
	if v, err := denoVersion(ctx, denoPath(cfg)); err != nil {
		fmt.Fprintf(stdout, "[info] %-22s %v\n", "code.run (deno)", err)
	} else {
		fmt.Fprintf(stdout, "[info] %-22s %s (%s)\n", "code.run (deno)", v, denoPath(cfg))
	}
	if failures > 0 {
		return fmt.Errorf("%d check(s) failed", failures)
	}
	return nil
}

func errText(err error, ok string) string {
	if err != nil {
		return err.Error()
	}
	return ok
}

func cmdKeys(args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) != 2 || args[0] != "hash" {
		return errors.New("usage: gateway keys hash KEY|-")
	}
	key := args[1]
	if key == "-" {
		line, err := bufio.NewReader(stdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		key = strings.TrimRight(line, "\r\n")
	}
	if key == "" {
		return errors.New("empty key")
	}
	sum := sha256.Sum256([]byte(key))
	fmt.Fprintln(stdout, hex.EncodeToString(sum[:]))
	return nil
}
