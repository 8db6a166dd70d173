package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// The realistic project grant of issue 17's P3: a tree of projectFiles
// files in projectDirs directories, granted read-write to the agent's
// Exec, so that what the sandbox does per call with a grant (the secret
// scan, the mounts) costs what it costs in real use.
const (
	projectDirs  = 2000
	projectFiles = 20000
)

// projectTree writes the tree under work/project once per run: projectDirs
// directories two levels deep (m<i>/p<j>), each with
// projectFiles/projectDirs small files. It returns the real path.
func (e *benchEnv) projectTree() (string, error) {
	if e.projectDir != "" {
		return e.projectDir, nil
	}
	root := filepath.Join(e.work, "project")
	perDir := projectFiles / projectDirs
	for d := range projectDirs {
		// 40 top-level directories of 50 each: a repository's shape (src/pkg/…).
		dir := filepath.Join(root, "m"+strconv.Itoa(d/50), "p"+strconv.Itoa(d%50))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		for f := range perDir {
			name := filepath.Join(dir, "f"+strconv.Itoa(f)+".go")
			if err := os.WriteFile(name, []byte("package p\n"), 0o644); err != nil {
				return "", err
			}
		}
	}
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", err
	}
	e.projectDir = real
	return real, nil
}

// execBundle is the shipped bundle with the project tree granted rw to the
// agent's Exec (alias @project), written once per run.
func (e *benchEnv) execBundle() (string, error) {
	if e.execBundleDir != "" {
		return e.execBundleDir, nil
	}
	proj, err := e.projectTree()
	if err != nil {
		return "", fmt.Errorf("project tree: %w", err)
	}
	dst := filepath.Join(e.work, "bundle-exec")
	if err := copyDir(e.shippedBundle, dst); err != nil {
		return "", fmt.Errorf("copy bundle: %w", err)
	}
	dataPath := filepath.Join(dst, "data.json")
	b, err := os.ReadFile(dataPath)
	if err != nil {
		return "", err
	}
	var data map[string]any
	if err := json.Unmarshal(b, &data); err != nil {
		return "", fmt.Errorf("%s: %w", dataPath, err)
	}
	ex, ok := dig(data, "portcullis", "config", "roles", "agent", "tools", "Exec")
	if !ok {
		return "", fmt.Errorf("%s: no portcullis.config.roles.agent.tools.Exec", dataPath)
	}
	grants, _ := ex["fs"].([]any)
	ex["fs"] = append(grants, map[string]any{"path": proj, "mode": "rw", "alias": "@project"})
	if b, err = json.MarshalIndent(data, "", "  "); err != nil {
		return "", err
	}
	if err := os.WriteFile(dataPath, b, 0o644); err != nil {
		return "", err
	}
	e.execBundleDir = dst
	return dst, nil
}

// bareBwrapArgs mirrors the mounts the gateway's bwrap backend gives an
// Exec with the project grant (backends/bwrap/args_linux.go): /usr and
// the merged-/usr links, the parts of /etc programs need, /proc, /dev,
// tmpfs /tmp and /var/tmp, the project bound read-write, the root
// read-only; every namespace unshared. It does not scan the grant for
// secrets or install seccomp: that is what the gateway adds.
func bareBwrapArgs(project string) []string {
	a := []string{"--die-with-parent", "--new-session", "--unshare-all", "--ro-bind", "/usr", "/usr"}
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if t, err := os.Readlink(d); err == nil {
				a = append(a, "--symlink", t, d)
			}
		case fi.IsDir():
			a = append(a, "--ro-bind", d, d)
		}
	}
	for _, f := range []string{"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
		"/etc/ssl", "/etc/ca-certificates", "/etc/pki", "/etc/crypto-policies",
		"/etc/alternatives", "/etc/localtime", "/etc/nsswitch.conf",
		"/etc/protocols", "/etc/services", "/etc/mime.types"} {
		a = append(a, "--ro-bind-try", f, f)
	}
	a = append(a, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/var/tmp",
		"--bind", project, project, "--remount-ro", "/", "--chdir", "/tmp", "/usr/bin/true")
	return a
}
