package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// buildGateway builds the gateway and the exec helper it runs beside it
// (as deployed) into dir and returns the gateway's path.
func buildGateway(ctx context.Context, repo, dir string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator),
		"./cmd/gateway", "./cmd/portcullis-exec-helper")
	cmd.Dir = repo
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/gateway: %w", err)
	}
	return filepath.Join(dir, "gateway"), nil
}

// opaModuleVersion reads the OPA version the module depends on from go.mod,
// so the OPA server is the same code the gateway embeds.
func opaModuleVersion(repo string) (string, error) {
	b, err := os.ReadFile(filepath.Join(repo, "go.mod"))
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "github.com/open-policy-agent/opa" {
			return f[1], nil
		}
	}
	return "", errors.New("go.mod: no github.com/open-policy-agent/opa requirement")
}

// ensureOPA returns an `opa` binary of the go.mod version: bin when given,
// else <repo>/.tools/bin/opa, installed with `go install` when missing or of
// another version.
func ensureOPA(ctx context.Context, repo, bin string) (path, version string, err error) {
	want, err := opaModuleVersion(repo)
	if err != nil {
		return "", "", err
	}
	if bin == "" {
		bin = filepath.Join(repo, ".tools", "bin", "opa")
		if v, err := opaVersion(ctx, bin); err != nil || "v"+v != want {
			logf("installing OPA %s into %s (go install)", want, filepath.Dir(bin))
			cmd := exec.CommandContext(ctx, "go", "install", "github.com/open-policy-agent/opa@"+want)
			cmd.Dir = repo
			cmd.Env = append(os.Environ(), "GOBIN="+filepath.Dir(bin))
			cmd.Stdout = os.Stderr
			cmd.Stderr = os.Stderr
			if err := cmd.Run(); err != nil {
				return "", "", fmt.Errorf("go install opa@%s: %w", want, err)
			}
		}
	}
	v, err := opaVersion(ctx, bin)
	if err != nil {
		return "", "", fmt.Errorf("%s version: %w", bin, err)
	}
	if "v"+v != want {
		logf("warning: %s is OPA %s, go.mod has %s", bin, v, want)
	}
	return bin, v, nil
}

func opaVersion(ctx context.Context, bin string) (string, error) {
	out, err := exec.CommandContext(ctx, bin, "version").Output()
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "Version: "); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("no Version line in %q", out)
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// server is one server process under test.
type server struct {
	name    string
	cmd     *exec.Cmd
	baseURL string
	logPath string
	dbName  string // the gateway's PostgreSQL database, if any
	done    chan struct{}
	waitErr error
}

// pid is the process id as /proc names it.
func (s *server) pid() string { return strconv.Itoa(s.cmd.Process.Pid) }

// startServer starts argv with its output in logPath, then polls readyURL
// (relative to http://127.0.0.1:port) until it answers 200.
func startServer(ctx context.Context, name string, argv, env []string, dir, logPath string, port int, readyPath string) (*server, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer lf.Close() // the child holds its own descriptor
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout = lf
	cmd.Stderr = lf
	// The server must not outlive the harness.
	cmd.SysProcAttr = dieWithParent()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	s := &server{name: name, cmd: cmd, baseURL: fmt.Sprintf("http://127.0.0.1:%d", port), logPath: logPath, done: make(chan struct{})}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.done)
	}()
	deadline := time.Now().Add(90 * time.Second)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		select {
		case <-s.done:
			return nil, fmt.Errorf("%s exited before ready (%v); log:\n%s", name, s.waitErr, tailFile(logPath, 4000))
		case <-ctx.Done():
			s.stop()
			return nil, ctx.Err()
		default:
		}
		resp, err := client.Get(s.baseURL + readyPath)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("%s not ready at %s%s within 90s; log:\n%s", name, s.baseURL, readyPath, tailFile(logPath, 4000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop sends SIGTERM, then SIGKILL after 10 s, and waits for the exit.
func (s *server) stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
