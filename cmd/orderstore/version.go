package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/status"
)

// Set by goreleaser: -X main.version=... -X main.commit=... -X main.date=...
var version, commit, date string

func getBuildInfo() status.BuildInfo {
	b := status.BuildInfo{Version: version, Commit: commit, Date: date, GoVersion: runtime.Version(), NATSServer: orderstore.NATSServerVersion}
	if bi, ok := debug.ReadBuildInfo(); ok {
		b.Version = cmp.Or(b.Version, either(bi.Main.Version != "(devel)", bi.Main.Version, ""))
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = cmp.Or(b.Commit, s.Value)
			case "vcs.time":
				b.Date = cmp.Or(b.Date, s.Value)
			}
		}
	}
	b.Version, b.Commit, b.Date = cmp.Or(b.Version, "dev"), cmp.Or(b.Commit, "unknown"), cmp.Or(b.Date, "unknown")
	return b
}

func versionCmd(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", stderr)
	if !parseFlags(fs, args) {
		return exitUsage
	}
	b := getBuildInfo()
	fmt.Fprintf(stdout, "orderstore %s\ncommit: %s\ndate: %s\ngo: %s\nnats-server: %s\n", b.Version, b.Commit, b.Date, b.GoVersion, b.NATSServer)
	return exitOK
}
