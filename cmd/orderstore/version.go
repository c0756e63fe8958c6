package main

import (
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/status"
)

// Set by goreleaser: -X main.version=... -X main.commit=... -X main.date=...
var (
	version = ""
	commit  = ""
	date    = ""
)

type buildInfo struct {
	Version, Commit, Date, Go, NATSServer string
}

// info is b as the appliance reports it.
func (b buildInfo) info() status.BuildInfo {
	return status.BuildInfo{Version: b.Version, Commit: b.Commit, Date: b.Date, GoVersion: b.Go, NATSServer: b.NATSServer}
}

func getBuildInfo() buildInfo {
	b := buildInfo{Version: version, Commit: commit, Date: date, Go: runtime.Version(), NATSServer: orderstore.NATSServerVersion}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if b.Commit == "" {
					b.Commit = s.Value
				}
			case "vcs.time":
				if b.Date == "" {
					b.Date = s.Value
				}
			}
		}
	}
	if b.Version == "" {
		b.Version = "dev"
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	if b.Date == "" {
		b.Date = "unknown"
	}
	return b
}

func versionCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	b := getBuildInfo()
	fmt.Fprintf(stdout, "orderstore %s\ncommit: %s\ndate: %s\ngo: %s\nnats-server: %s\n", b.Version, b.Commit, b.Date, b.Go, b.NATSServer)
	return exitOK
}
