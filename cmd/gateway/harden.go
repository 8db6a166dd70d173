package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/portcullis/portcullis/cmd/gateway/internal/config"
	"github.com/portcullis/portcullis/wire"
)

// scrubEnv removes the gateway's secrets from its own environment once they
// have been read: every PORTCULLIS_* variable (the config, which may hold
// database_url with its password) and every secret-shaped name
// (wire.SecretName: *_KEY, *_TOKEN, AWS_*, DATABASE_URL ...). Nothing the
// gateway starts later can inherit them, and Exec's env.pass could never
// pass them anyway. It returns the names removed (never values).
//
// unsetenv does not erase the initial environment block the kernel shows
// in /proc/<pid>/environ; that file is protected by the process being
// non-dumpable (nonDumpable) and, on the process backend under a root
// gateway, by programs running as another user.
func scrubEnv() []string {
	var names []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name != "" && (strings.HasPrefix(name, "PORTCULLIS_") || wire.SecretName(name)) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	for _, n := range names {
		_ = os.Unsetenv(n)
	}
	return names
}

// gatewayFile reports whether name (an entry of data_dir) is one the
// gateway makes there.
func gatewayFile(name string) bool {
	return name == "bundles" || name == "evidence-signing.key" || strings.HasPrefix(name, "evidence.db")
}

// privateDataDir makes data_dir the gateway's own: created 0700, and if it
// exists with group or other access, tightened to 0700 when it holds
// nothing but the gateway's files (else serve refuses: it is someone
// else's directory). The gateway's files in it (the embedded store and its
// -wal, -shm, -journal, -lead and -migrate files, the dev signing key, the
// archived bundles) are made 0600 and its subdirectories 0700, which
// repairs installs made before the gateway insisted. The embedded store's
// database file is created 0600 before SQLite opens it: SQLite gives its
// -wal, -shm and journal files the database file's mode.
func privateDataDir(cfg config.Config, log *slog.Logger) error {
	dir := cfg.DataDir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data_dir: %w", err)
	}
	st, err := os.Stat(dir) // a symlinked data_dir is the operator's choice
	if err != nil {
		return fmt.Errorf("data_dir: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("data_dir: %s is not a directory", dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("data_dir: %w", err)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		for _, e := range entries {
			if !gatewayFile(e.Name()) {
				return fmt.Errorf("data_dir: %s is accessible to other users (mode %04o) and holds %q, which the gateway did not make; give the gateway a directory of its own (it creates it with mode 0700)", dir, perm, e.Name())
			}
		}
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("data_dir: %s is accessible to other users (mode %04o) and could not be made private: %w", dir, perm, err)
		}
		log.Warn("data_dir was accessible to other users; made private (0700)", "data_dir", dir, "was", fmt.Sprintf("%04o", perm))
	}
	for _, e := range entries {
		if gatewayFile(e.Name()) {
			if err := privateTree(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("data_dir: %w", err)
			}
		}
	}
	if cfg.DatabaseURL == "" {
		f, err := os.OpenFile(filepath.Join(dir, "evidence.db"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			err = f.Close()
		} else if errors.Is(err, fs.ErrExist) {
			err = nil
		}
		if err != nil {
			return fmt.Errorf("data_dir: creating the embedded store: %w", err)
		}
	}
	return nil
}

// privateTree makes path (not following symlinks) and, for a directory,
// everything below it, owner-only: directories 0700, files 0600.
func privateTree(path string) error {
	return filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil // chmod would follow it
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		if fi.Mode().Perm()&^want != 0 {
			return os.Chmod(p, fi.Mode().Perm()&want)
		}
		return nil
	})
}

// configFileWarning says when the config file is readable by other users:
// it holds the principals' key hashes and perhaps database_url's password.
// The signing key and bundle token files are refused outright when they
// are (config.Validate); the config is the operator's to place, so it is a
// warning.
func configFileWarning(path string, log *slog.Logger) {
	if path == "" {
		return
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm()&0o044 == 0 {
		return
	}
	log.Warn("the config file is readable by other users: it holds the principals' API key hashes (and database_url); chmod 600 it",
		"config", path, "mode", fmt.Sprintf("%04o", st.Mode().Perm()))
}
