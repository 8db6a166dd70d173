package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/portcullis/portcullis/evidence"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/mod/sumdb/note"

	"github.com/portcullis/portcullis/backends/bwrap"
	"github.com/portcullis/portcullis/cmd/gateway/internal/config"
	"github.com/portcullis/portcullis/evidence/postgres"
	"github.com/portcullis/portcullis/evidence/sqlite"
)

func configFlag(fs *pflag.FlagSet) *string {
	return fs.String("config", os.Getenv("PORTCULLIS_CONFIG"), "config file (YAML)")
}

// configCmd is an operator command that reads the config file (--config):
// the command, its flags and the config path.
func configCmd(use, short string, args cobra.PositionalArgs) (*cobra.Command, *pflag.FlagSet, *string) {
	c := &cobra.Command{Use: use, Short: short, Args: args}
	return c, c.Flags(), configFlag(c.Flags())
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

func migrateCmd() *cobra.Command {
	c, _, cfgPath := configCmd("migrate [--config FILE]", "apply evidence store migrations", noArgs)
	c.RunE = func(c *cobra.Command, _ []string) error {
		return cmdMigrate(c.Context(), *cfgPath, c.OutOrStdout())
	}
	return c
}

func cmdMigrate(ctx context.Context, cfgPath string, stdout io.Writer) error {
	cfg, err := loadToolConfig(cfgPath)
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

// sqlitePath is the embedded store's file under data_dir, created empty
// with mode 0600 when missing so that SQLite, which gives its -wal, -shm
// and journal files the database file's mode, never makes any of them
// readable by others.
func sqlitePath(cfg config.Config) (string, error) {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return "", fmt.Errorf("data_dir: %w", err)
	}
	path := filepath.Join(cfg.DataDir, "evidence.db")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case err == nil:
		err = f.Close()
	case errors.Is(err, os.ErrExist):
		err = nil
	}
	if err != nil {
		return "", fmt.Errorf("data_dir: creating the embedded store: %w", err)
	}
	return path, nil
}

// cmdDoctor checks each part the gateway needs and says what is wrong.
func doctorCmd() *cobra.Command {
	c, _, cfgPath := configCmd("doctor [--config FILE]", "check store, migrations, sandbox and policy", noArgs)
	c.RunE = func(c *cobra.Command, _ []string) error {
		return cmdDoctor(c.Context(), *cfgPath, c.OutOrStdout())
	}
	return c
}

func cmdDoctor(ctx context.Context, cfgPath string, stdout io.Writer) error {
	failures := 0
	report := func(ok bool, what, detail string) {
		mark := "ok  "
		if !ok {
			mark = "FAIL"
			failures++
		}
		fmt.Fprintf(stdout, "[%s] %-22s %s\n", mark, what, detail)
	}
	cfg, err := loadToolConfig(cfgPath)
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
	ps, err := openPolicy(ctx, cfg, slog.New(slog.DiscardHandler), describedTools(), nil, false)
	detail := ""
	if err == nil {
		info, _ := ps.engine.Info()
		detail = fmt.Sprintf("%s revision %s", cfg.Policy.Bundle, info.Revision)
	}
	report(err == nil, "policy", errText(err, detail))
	doctorIdentity(ctx, cfg, stdout, report)

	if runtime.GOOS == "linux" {
		br := bwrap.New(bwrap.Options{}).Report(ctx)
		rb, _ := json.MarshalIndent(br, "       ", "  ")
		fmt.Fprintf(stdout, "[info] %-22s %s\n", "sandbox (bwrap)", rb)
	}
	// The same choice serve makes, with the same probe.
	runner, rerr := chooseRunner(ctx, cfg, slog.New(slog.DiscardHandler))
	switch {
	case rerr != nil:
		report(false, "sandbox", rerr.Error()+" (serve refuses to start)")
	case refusal(runner) != "":
		fmt.Fprintf(stdout, "[warn] %-22s Exec and code.run will be refused (503 sandbox_unavailable): %s\n", "exec backend", refusal(runner))
	case runner.Name() == "process":
		who := "this gateway's own user: programs can read every file it can"
		if os.Geteuid() == 0 {
			uid, gid, _, _ := cfg.Sandbox.RunAsIDs()
			who = fmt.Sprintf("uid %d gid %d (sandbox.run_as)", uid, gid)
		}
		fmt.Fprintf(stdout, "[warn] %-22s process (named in sandbox.backend): rlimits only, no filesystem or network confinement; programs run as %s\n", "exec backend", who)
	default:
		fmt.Fprintf(stdout, "[info] %-22s %s\n", "exec backend", runner.Name())
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

func keysCmd() *cobra.Command {
	hash := &cobra.Command{
		Use: "hash KEY|-", Short: "print the SHA-256 of an API key for the config (- reads it from stdin)", Args: exactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return cmdKeysHash(args[0], c.InOrStdin(), c.OutOrStdout())
		},
	}
	return group("keys", "API key hashes and the evidence signing key", hash, keysSigningKeyCmd())
}

func cmdKeysHash(key string, stdin io.Reader, stdout io.Writer) error {
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

// defaultSigningKeyName is the key name of `keys signing-key`: the origin
// line of every checkpoint it signs.
const defaultSigningKeyName = "portcullis/evidence"

// cmdKeysSigningKey is `gateway keys signing-key -o FILE`: a new Ed25519
// note key for evidence.signing_key, written with mode 0600 (never over an
// existing file unless --force), and its verifier key on stdout, which is
// what auditors pin (`evidence verify --key`).
func keysSigningKeyCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "signing-key -o FILE [--name N] [--force]",
		Short: "create an evidence checkpoint signing key (mode 0600) and print its verifier key",
		Args:  noArgs,
	}
	out := c.Flags().StringP("output", "o", "", "file to write the signing key to (mode 0600; required)")
	name := c.Flags().String("name", defaultSigningKeyName, "key name: the origin line of the signed checkpoints")
	force := c.Flags().Bool("force", false, "replace FILE if it exists (checkpoints signed by the old key then need the old verifier key)")
	c.RunE = func(c *cobra.Command, _ []string) error {
		if err := required(c.Flags(), "output"); err != nil {
			return err
		}
		return cmdKeysSigningKey(*out, *name, *force, c.OutOrStdout(), c.ErrOrStderr())
	}
	return c
}

func cmdKeysSigningKey(out, name string, force bool, stdout, stderr io.Writer) error {
	skey, vkey, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		return fmt.Errorf("key name %q: %w", name, err)
	}
	if err := writePrivateFile(out, []byte(skey+"\n"), force); err != nil {
		return err
	}
	fmt.Fprintln(stdout, vkey)
	fmt.Fprintf(stderr, "wrote the signing key to %s (mode 0600); set evidence.signing_key to it. The verifier key above is what auditors pin: keep a copy where the gateway cannot write.\n", out)
	return nil
}

// writePrivateFile writes b to path with mode 0600. Without force an
// existing path (a file, a symlink, anything) is refused; with force the
// key is written beside it and renamed over it, so path is never a
// half-written key nor, for a moment, another mode.
func writePrivateFile(path string, b []byte, force bool) error {
	if !force {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s exists; not overwriting a signing key (use --force to replace it)", path)
		}
		if err != nil {
			return err
		}
		if _, err := f.Write(b); err != nil {
			f.Close()
			os.Remove(path)
			return err
		}
		if err := f.Sync(); err != nil {
			f.Close()
			os.Remove(path)
			return err
		}
		return f.Close()
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".signing-key-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
