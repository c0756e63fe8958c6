// Command orderstore runs a durable order-event log: an embedded NATS JetStream server with the
// ORDER_EVENTS stream, a built-in processor and an HTTP admin listener, configured by a TOML file.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/orderstore/orderstore"
)

// Exit codes.
const (
	exitOK      = 0 // success, or a clean shutdown on a signal
	exitFailure = 1 // runtime failure
	exitUsage   = 2 // usage or configuration error
	// exitInterrupted: Ctrl-C stopped a command following a background
	// task (128 + SIGINT, as a shell reports it); the task goes on.
	exitInterrupted = 130
)

// exitIf is exitFailure when failed, else exitOK.
func exitIf(failed bool) int { return either(failed, exitFailure, exitOK) }

// either is yes when cond holds, else no (both are evaluated).
func either[T any](cond bool, yes, no T) T {
	if cond {
		return yes
	}
	return no
}

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: orderstore <command> [flags]

commands:
  run      [-config FILE]            run the appliance (no file: built-in defaults)
  check    [-config FILE] [-print]   validate the config and preflight; -print shows the effective config
  status   [-admin URL] [-json]      summary of a running instance (durability, stream vs limits, lag, DLQ)
  order    ID [-events] [-as-of T]   an order's state, its events (-events), its state as of a time or sequence
  orders   [-status S] [-stale]      orders by status and age (-older-than D, -newest, -limit N, -all, -json)
  dlq list [-from SEQ] [-limit N]    list dead letters of a running instance
  dlq replay SEQ... | -all           republish dead letters to their original subjects
  projection rebuild [-from-seq N]   rebuild the projection from the stream beside the live one; -cancel stops it
  projection status                  the projection rebuild under way, or the last one
  backup   [-config FILE] DIR        back up the stream, dead letters and projection of a running instance
  backup -offline [-config FILE] DIR the same of a stopped instance's store
  restore  [-config FILE] DIR        restore a backup into an empty store (orderstore stopped)
  key generate FILE                  write a new store encryption key to FILE (mode 0600)
  version                            print version, commit, build date, Go and nats-server versions

The config path comes from -config, else $ORDERSTORE_CONFIG, else none.
Run 'orderstore <command> -h' for a command's flags.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return usageErr(stderr, "%s", usage)
	}
	cmd, rest := args[0], args[1:]
	if c, ok := commands[cmd]; ok {
		return c(ctx, rest, stdout, stderr)
	}
	if cmd == "help" || cmd == "-h" || cmd == "-help" || cmd == "--help" {
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	return usageErr(stderr, "orderstore: unknown command %q\n\n%s", cmd, usage)
}

// commands are the subcommands by name.
var commands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) int{
	"run": runCmd, "check": checkCmd, "status": statusCmd, "order": orderCmd, "orders": ordersCmd, "dlq": dlqCmd,
	"projection": projectionCmd, "backup": backupCmd, "restore": restoreCmd, "key": keyCmd,
	"version": versionCmd, "-version": versionCmd, "--version": versionCmd,
}

// printErr writes err and, when it carries one, its hint on a line of its
// own. This is the only place errors are printed for the user.
func printErr(w io.Writer, err error) {
	fmt.Fprintf(w, "orderstore: %s\n", strings.ReplaceAll(err.Error(), "\n", "\n  "))
	if h := hintOf(err); h != "" {
		fmt.Fprintf(w, "hint: %s\n", h)
	}
}

// fail prints err as printErr does and returns the exit code code.
func fail(w io.Writer, code int, err error) int {
	printErr(w, err)
	return code
}

// usageErr prints a usage problem (format as fmt.Fprintf takes it) and returns exitUsage.
func usageErr(w io.Writer, format string, a ...any) int {
	fmt.Fprintf(w, format, a...)
	return exitUsage
}

// hintOf finds the first hint in err's chain.
func hintOf(err error) string {
	if h := orderstore.Hinted(nil); errors.As(err, &h) {
		return h.Hint()
	}
	return ""
}

// withHint attaches a hint to an error from a package that has none.
func withHint(err error, hint string) error { return orderstore.WithHint(err, hint) }

// parseFlags parses the flags of a command that takes no arguments, and
// refuses any (a file without -config would go unread); false: exit 2.
func parseFlags(fs *flag.FlagSet, args []string) bool {
	if err := fs.Parse(args); err != nil || fs.NArg() == 0 {
		return err == nil
	}
	fmt.Fprintf(fs.Output(), "orderstore %s: unexpected arguments %q ('orderstore %s -h' lists its flags)\n", fs.Name(), fs.Args(), fs.Name())
	return false
}

// newFlagSet is a subcommand's flags, reporting on stderr.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// printJSON writes v as indented JSON (-json).
func printJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
