package bwrap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/backends/egress"
	"github.com/portcullis/portcullis/backends/sandbox"
)

// netSandbox is posture allowlist for one call: a fresh network namespace
// holding only a loopback interface, with the call's own egress proxy
// listening on it. The namespace is created by the gateway (root) in the
// init user namespace, so the sandbox, which has no capabilities there,
// cannot change its interfaces or routes; its only way out is the proxy,
// whose dials happen in the gateway's namespace after the allowlist check.
type netSandbox struct {
	proxy *egress.Proxy
	ln    net.Listener
	done  chan struct{}
}

func (r *Runner) newNetSandbox(ctx context.Context, allow []string) (*netSandbox, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("bwrap: network posture allowlist needs the gateway to run as root (to create the per-call network namespace); use posture off or full, or run as root")
	}
	al, err := egress.ParseAllowlist(allow)
	if err != nil {
		return nil, fmt.Errorf("bwrap: network allowlist: %w", err)
	}
	p := egress.New(egress.Options{Allow: al, Resolver: r.opts.Resolver, Logger: r.log})
	return &netSandbox{proxy: p, done: make(chan struct{})}, nil
}

// enter runs on the locked thread that starts bwrap: it moves the thread
// into a new network namespace, brings loopback up and opens the proxy's
// listener there. bwrap, started from this thread without --unshare-net,
// inherits the namespace. The thread is tainted and never reused.
func (n *netSandbox) enter() error {
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("bwrap: new network namespace: %w", err)
	}
	if err := loopbackUp(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp4", ProxyAddr)
	if err != nil {
		return fmt.Errorf("bwrap: egress proxy listener: %w", err)
	}
	n.ln = ln
	go func() {
		defer close(n.done)
		_ = n.proxy.Serve(ln)
	}()
	return nil
}

// loopbackUp sets IFF_UP on lo in the current thread's network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("bwrap: socket for lo: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("bwrap: ifreq lo: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bwrap: SIOCGIFFLAGS lo: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bwrap: bringing lo up: %w", err)
	}
	return nil
}

// finish stops the proxy (closing every tunnel) and returns its account.
func (n *netSandbox) finish() sandbox.NetworkStats {
	n.close()
	return n.proxy.Stats()
}

func (n *netSandbox) close() {
	_ = n.proxy.Close()
	if n.ln != nil {
		<-n.done
	}
}
