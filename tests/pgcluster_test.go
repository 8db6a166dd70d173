package tests

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgCluster is a throwaway PostgreSQL cluster a test owns outright, so it
// can stop and start it (the shared server at 5432 is never touched). It
// follows scripts/test.sh: initdb and pg_ctl from /usr/lib/postgresql/*/bin
// (or PATH), run as the postgres user when the test runs as root (initdb
// refuses root), data directory owned by that user, a free loopback port,
// the socket in the cluster's own directory.
type pgCluster struct {
	bin  string   // directory of initdb, pg_ctl
	dir  string   // root: data/, server.log, socket
	port int      // TCP port on 127.0.0.1
	run  []string // command prefix (runuser -u postgres --) or nil
}

// newPGCluster creates and starts a cluster, removed when t ends. When no
// PostgreSQL binaries exist the test is skipped, or fails under
// PORTCULLIS_REQUIRE_POSTGRES=1.
func newPGCluster(t *testing.T) *pgCluster {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if os.Getenv("PORTCULLIS_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("throwaway PostgreSQL cluster required (PORTCULLIS_REQUIRE_POSTGRES=1): %s", msg)
		}
		t.Skipf("no throwaway PostgreSQL cluster: %s", msg)
	}
	bin := pgBinDir()
	if bin == "" {
		fail("no initdb/pg_ctl on PATH or in /usr/lib/postgresql/*/bin")
	}
	dir, err := os.MkdirTemp("", "portcullis-pgfault-")
	if err != nil {
		t.Fatal(err)
	}
	c := &pgCluster{bin: bin, dir: dir}
	t.Cleanup(func() {
		// Immediate: the data is thrown away anyway. A failed stall test
		// may leave the cluster stopped with SIGSTOP: continue it first.
		_ = c.resume()
		_ = c.ctl(context.Background(), "-D", c.dataDir(), "-m", "immediate", "-w", "-t", "30", "stop")
		_ = os.RemoveAll(dir)
	})
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			fail("running as root and there is no postgres user to run initdb as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		c.run = []string{"runuser", "-u", "postgres", "--"}
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := c.command(ctx, filepath.Join(bin, "initdb"), "-D", c.dataDir(), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		fail("initdb: %v\n%s", err, out)
	}
	if c.port, err = freePort(); err != nil {
		t.Fatal(err)
	}
	if err := c.start(ctx); err != nil {
		fail("%v", err)
	}
	return c
}

// pgBinDir finds initdb and pg_ctl: PATH first, else the newest
// /usr/lib/postgresql/*/bin.
func pgBinDir() string {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if _, err := exec.LookPath("initdb"); err == nil {
			if r, err := filepath.EvalSymlinks(p); err == nil {
				return filepath.Dir(r)
			}
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi < vj
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i]
		}
	}
	return ""
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (c *pgCluster) dataDir() string { return filepath.Join(c.dir, "data") }

func (c *pgCluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	argv := append(append(append([]string(nil), c.run...), name), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = c.dir
	return cmd
}

func (c *pgCluster) ctl(ctx context.Context, args ...string) error {
	out, err := c.command(ctx, filepath.Join(c.bin, "pg_ctl"), args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// start starts the cluster on its port and waits until it accepts
// connections.
func (c *pgCluster) start(ctx context.Context) error {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100", c.port, c.dir)
	if err := c.ctl(ctx, "-D", c.dataDir(), "-l", filepath.Join(c.dir, "server.log"), "-w", "-t", "60", "-o", opts, "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
		return fmt.Errorf("%v\nserver.log:\n%s", err, tail(string(log), 4000))
	}
	return nil
}

// stopImmediate is `pg_ctl stop -m immediate`: every backend is killed at
// once, as in a crash; the next start runs crash recovery.
func (c *pgCluster) stopImmediate(ctx context.Context) error {
	return c.ctl(ctx, "-D", c.dataDir(), "-m", "immediate", "-w", "-t", "60", "stop")
}

// url is a connection URL for database db.
func (c *pgCluster) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, db)
}

// createDB creates database name in the cluster and returns its URL.
func (c *pgCluster) createDB(t *testing.T, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.url("postgres"))
	if err != nil {
		t.Fatalf("connect to the throwaway cluster: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	return c.url(name)
}

// processes returns the postmaster's pid followed by its children's (the
// backends, checkpointer, WAL writer, ...), read from postmaster.pid and
// /proc.
func (c *pgCluster) processes() ([]int, error) {
	b, err := os.ReadFile(filepath.Join(c.dataDir(), "postmaster.pid"))
	if err != nil {
		return nil, err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pm, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return nil, fmt.Errorf("postmaster.pid: %q: %v", first, err)
	}
	pids := []int{pm}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid == pm {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// pause stalls the whole cluster with SIGSTOP, postmaster first so it
// forks no new backend: connections stay open and accepted by the kernel
// but nothing answers, as with a hung server, a storage freeze or a
// network partition that drops packets. resume undoes it.
func (c *pgCluster) pause() error { return c.signalAll(syscall.SIGSTOP, false) }

// resume continues a paused cluster, children first.
func (c *pgCluster) resume() error { return c.signalAll(syscall.SIGCONT, true) }

func (c *pgCluster) signalAll(sig syscall.Signal, reverse bool) error {
	pids, err := c.processes()
	if err != nil {
		return err
	}
	if reverse {
		slices.Reverse(pids)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, sig); err != nil && err != syscall.ESRCH {
			return fmt.Errorf("kill -%d %d: %w", sig, pid, err)
		}
	}
	if len(pids) < 2 {
		return fmt.Errorf("found only %d PostgreSQL processes: %v", len(pids), pids)
	}
	return nil
}
