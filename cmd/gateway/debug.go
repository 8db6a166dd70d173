package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// debugServer is the opt-in diagnostics listener (debug.listen): the
// net/http/pprof handlers on their own http.Server, never on the API
// listener. It has no authentication; config validation allows only
// loopback addresses.
type debugServer struct {
	hs   *http.Server
	addr string
}

// debugMux serves the pprof index and profiles under /debug/pprof/. It is
// its own mux: the API handler never serves http.DefaultServeMux, where the
// net/http/pprof import also registers these routes.
func debugMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// startDebug listens on addr and serves pprof in the background. An empty
// addr starts nothing and returns nil.
func startDebug(addr string, log *slog.Logger) (*debugServer, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("debug.listen %s: %w", addr, err)
	}
	d := &debugServer{
		addr: ln.Addr().String(),
		hs: &http.Server{
			Handler:           debugMux(),
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       120 * time.Second,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
	}
	go func() {
		if err := d.hs.Serve(ln); err != nil && err != http.ErrServerClosed {
			log.Error("debug listener stopped", "addr", d.addr, "err", err)
		}
	}()
	log.Warn("pprof debug listener enabled (no authentication, loopback only)", "addr", d.addr)
	return d, nil
}

// close stops the listener at once, cutting any profile in progress; nil
// is a no-op.
func (d *debugServer) close() {
	if d == nil {
		return
	}
	_ = d.hs.Close()
}
