package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/portcullis/portcullis/cmd/gateway/internal/config"
)

// denoPath finds the deno binary code.run uses: tools.deno
// (PORTCULLIS_TOOLS_DENO), then PORTCULLIS_DENO (what the test command
// exports), then ./.tools (where the test command installs it), then deno
// on PATH. "" means none: code.run answers backend_unavailable.
func denoPath(cfg config.Config) string {
	if cfg.Tools.Deno != "" {
		return absOrEmpty(cfg.Tools.Deno)
	}
	arch := map[string]string{"amd64": "x64", "arm64": "arm64"}[runtime.GOARCH]
	for _, c := range []string{
		os.Getenv("PORTCULLIS_DENO"),
		filepath.Join(".tools", "node_modules", "@deno", "linux-"+arch+"-glibc", "deno"),
		filepath.Join(".tools", "node_modules", "@deno", "linux-"+arch+"-glibc", "bin", "deno"),
	} {
		if c == "" {
			continue
		}
		if fi, err := os.Stat(c); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return absOrEmpty(c)
		}
	}
	if p, err := exec.LookPath("deno"); err == nil {
		return absOrEmpty(p)
	}
	return ""
}

func absOrEmpty(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return ""
	}
	return abs
}

// denoVersion runs `deno --version` and returns its first line.
func denoVersion(ctx context.Context, path string) (string, error) {
	if path == "" {
		return "", errors.New("no deno found (set tools.deno / PORTCULLIS_TOOLS_DENO): code.run answers backend_unavailable")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "--version")
	cmd.Env = []string{"NO_COLOR=1", "DENO_NO_UPDATE_CHECK=1"}
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", path, err)
	}
	first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return first, nil
}
