package main

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/portcullis/portcullis/backends/process"
	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/cmd/gateway/internal/config"
	"github.com/portcullis/portcullis/wire"
)

// TestScrubEnv: PORTCULLIS_* and secret-shaped variables leave the
// process environment; ordinary ones stay.
func TestScrubEnv(t *testing.T) {
	// scrubEnv clears the whole process environment's secrets: put back
	// what the test command exported (PORTCULLIS_DENO, ...) afterwards.
	before := os.Environ()
	t.Cleanup(func() {
		for _, kv := range before {
			k, v, _ := strings.Cut(kv, "=")
			if _, ok := os.LookupEnv(k); !ok {
				os.Setenv(k, v)
			}
		}
	})
	t.Setenv("PORTCULLIS_DATABASE_URL", "postgres://u:pw@db/x")
	t.Setenv("ANTHROPIC_API_KEY", "sk-test")
	t.Setenv("MY_SERVICE_TOKEN", "t0k")
	t.Setenv("DATABASE_URL", "postgres://u:pw@db/y")
	t.Setenv("GOFLAGS", "-mod=mod")
	got := scrubEnv()
	for _, n := range []string{"PORTCULLIS_DATABASE_URL", "ANTHROPIC_API_KEY", "MY_SERVICE_TOKEN", "DATABASE_URL"} {
		if !slices.Contains(got, n) {
			t.Errorf("%s not reported scrubbed (%v)", n, got)
		}
		if _, ok := os.LookupEnv(n); ok {
			t.Errorf("%s still in the environment", n)
		}
	}
	if os.Getenv("GOFLAGS") != "-mod=mod" {
		t.Error("GOFLAGS was scrubbed; only secret-shaped names should be")
	}
	for _, kv := range os.Environ() {
		if strings.Contains(kv, "pw@db") || strings.Contains(kv, "sk-test") {
			t.Errorf("secret left in the environment: %q", kv)
		}
	}
}

func modeOf(t *testing.T, p string) fs.FileMode {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// TestPrivateDataDir: a new data_dir is 0700 with a 0600 store file made
// before SQLite; an old install's group-readable files are tightened; a
// shared directory holding someone else's files is refused, not chmodded.
func TestPrivateDataDir(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	t.Run("new", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "data")
		if err := privateDataDir(config.Config{DataDir: dir}, log); err != nil {
			t.Fatal(err)
		}
		if m := modeOf(t, dir); m != 0o700 {
			t.Errorf("data_dir mode %04o", m)
		}
		if m := modeOf(t, filepath.Join(dir, "evidence.db")); m != 0o600 {
			t.Errorf("evidence.db mode %04o", m)
		}
	})
	t.Run("old install", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"evidence.db", "evidence.db-wal", "evidence-signing.key"} {
			if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.MkdirAll(filepath.Join(dir, "bundles"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "bundles", "a.tar.gz"), nil, 0o664); err != nil {
			t.Fatal(err)
		}
		if err := privateDataDir(config.Config{DataDir: dir}, log); err != nil {
			t.Fatal(err)
		}
		for p, want := range map[string]fs.FileMode{
			dir: 0o700, filepath.Join(dir, "bundles"): 0o700, filepath.Join(dir, "bundles", "a.tar.gz"): 0o600,
			filepath.Join(dir, "evidence.db"): 0o600, filepath.Join(dir, "evidence.db-wal"): 0o600,
			filepath.Join(dir, "evidence-signing.key"): 0o600,
		} {
			if m := modeOf(t, p); m != want {
				t.Errorf("%s mode %04o, want %04o", p, m, want)
			}
		}
	})
	t.Run("shared directory", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "someone-elses.txt"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		err := privateDataDir(config.Config{DataDir: dir}, log)
		if err == nil || !strings.Contains(err.Error(), "someone-elses.txt") {
			t.Errorf("err = %v, want a refusal naming the foreign file", err)
		}
		if m := modeOf(t, dir); m != 0o755 {
			t.Errorf("a shared directory was chmodded to %04o", m)
		}
	})
	t.Run("symlink inside is not followed", func(t *testing.T) {
		t.Parallel()
		dir, outside := t.TempDir(), filepath.Join(t.TempDir(), "victim")
		if err := os.WriteFile(outside, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, "bundles"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, filepath.Join(dir, "bundles", "link.tar.gz")); err != nil {
			t.Fatal(err)
		}
		if err := privateDataDir(config.Config{DataDir: dir}, log); err != nil {
			t.Fatal(err)
		}
		if m := modeOf(t, outside); m != 0o644 {
			t.Errorf("a file outside data_dir was chmodded through a symlink to %04o", m)
		}
	})
}

// TestChooseRunnerNeverProcessSilently: auto and a broken named sandbox
// never give the process backend; naming process does, as another user
// under root.
func TestChooseRunnerNeverProcessSilently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	cfg := config.Default()
	cfg.Sandbox.Backend = "seatbelt" // never works on Linux
	if _, err := chooseRunner(ctx, cfg, log); err == nil || !strings.Contains(err.Error(), "sandbox.require") {
		t.Errorf("named seatbelt on Linux with require: err = %v, want a start refusal", err)
	}
	cfg.Sandbox.Require = false
	r, err := chooseRunner(ctx, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if r.Name() == process.Name || refusal(r) == "" {
		t.Errorf("named seatbelt without require gave %s (refusal %q), want a refusing runner", r.Name(), refusal(r))
	}
	_, err = r.Run(ctx, sandbox.Spec{})
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeSandboxUnavailable {
		t.Errorf("refusing runner: %v, want sandbox_unavailable", err)
	}
	cfg = config.Default()
	cfg.Sandbox.Backend = "process"
	r, err = chooseRunner(ctx, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if r.Name() != process.Name {
		t.Errorf("named process gave %s", r.Name())
	}
}

// TestUnavailableMessage: the refusal says why and the two ways out.
func TestUnavailableMessage(t *testing.T) {
	t.Parallel()
	_, err := unavailableRunner{reason: "no OS sandbox works here (bwrap: x); install bubblewrap, or name `sandbox.backend: process` explicitly"}.Run(context.Background(), sandbox.Spec{})
	if err == nil || !strings.Contains(err.Error(), "install bubblewrap") || !strings.Contains(err.Error(), "sandbox.backend: process") {
		t.Errorf("message %v", err)
	}
}

// TestKeysSigningKey: the key file is 0600, pairs with the printed
// verifier key, and is never overwritten without --force.
func TestKeysSigningKey(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "k")
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"keys", "signing-key", "-o", path}, nil, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if m := modeOf(t, path); m != 0o600 {
		t.Errorf("mode %04o", m)
	}
	b, _ := os.ReadFile(path)
	s, err := note.NewSigner(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(strings.TrimSpace(out.String()))
	if err != nil {
		t.Fatal(err)
	}
	if s.Name() != defaultSigningKeyName || v.KeyHash() != s.KeyHash() {
		t.Errorf("signer %s %x, verifier %s %x", s.Name(), s.KeyHash(), v.Name(), v.KeyHash())
	}
	if code := run(context.Background(), []string{"keys", "signing-key", "-o", path}, nil, &out, &errOut); code != 1 {
		t.Error("overwrote without --force")
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(filepath.Join(t.TempDir(), "target"), link); err != nil {
		t.Fatal(err)
	}
	if code := run(context.Background(), []string{"keys", "signing-key", "-o", link}, nil, &out, &errOut); code != 1 {
		t.Error("wrote through a dangling symlink without --force")
	}
	if code := run(context.Background(), []string{"keys", "signing-key", "-o", path, "--name", "bad name"}, nil, &out, &errOut); code != 1 {
		t.Error("accepted a key name with a space")
	}
}
