package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
)

// buildInfo is what this binary knows of its own build (the Go toolchain
// stamps it: the module version for `go install ...@v`, the VCS revision
// for a build from a checkout).
type buildInfo struct {
	Version   string
	Commit    string
	Modified  bool
	GoVersion string
}

func readBuildInfo() buildInfo {
	b := buildInfo{Version: "(devel)", Commit: "unknown", GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if v := bi.Main.Version; v != "" {
		b.Version = v
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

func (b buildInfo) commitString() string {
	if b.Modified {
		return b.Commit + " (modified)"
	}
	return b.Commit
}

// versionString is `gateway --version` and `gateway version`.
func versionString() string {
	b := readBuildInfo()
	return fmt.Sprintf("gateway version %s\ncommit %s\ngo %s %s/%s", b.Version, b.commitString(), b.GoVersion, runtime.GOOS, runtime.GOARCH)
}

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use: "version", Short: "print version, commit and Go version (as --version)", Args: noArgs,
		Run: func(c *cobra.Command, _ []string) { fmt.Fprintln(c.OutOrStdout(), versionString()) },
	}
}

// buildInfoGauge is portcullis_build_info{version, commit, goversion} = 1,
// the Prometheus convention for joining a build's identity to any series.
func buildInfoGauge() prometheus.Collector {
	b := readBuildInfo()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "portcullis_build_info",
		Help: "The running gateway's build: version, commit (vcs.revision) and Go version; always 1.",
		ConstLabels: prometheus.Labels{
			"version": b.Version, "commit": b.commitString(), "goversion": b.GoVersion,
		},
	})
	g.Set(1)
	return g
}
