package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/internal/config"
)

// checkCmd validates the config and runs the preflight checks, like
// `nats-server -t`. Exit 0 valid, 2 invalid config, 1 preflight failure.
func checkCmd(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("check", stderr)
	configPath := fs.String("config", "", "config file (default: $ORDERSTORE_CONFIG, else built-in defaults)")
	print := fs.Bool("print", false, "print the effective config (defaults filled in, secrets redacted)")
	if !parseFlags(fs, args) {
		return exitUsage
	}
	fc, name, err := loadConfig(*configPath)
	if err != nil {
		printErr(stderr, err)
		if invalid := (*orderstore.ValidationError)(nil); errors.As(err, &invalid) {
			// Every problem at once: the files the keys name too.
			if cfg, cerr := fc.Orderstore(); cerr == nil {
				if ferr := cfg.CheckFiles(); ferr != nil {
					printErr(stderr, withHint(ferr, "fix the files the keys name: run would refuse to start the same way"))
				}
			}
		}
		return exitUsage
	}
	cfg, err := fc.Orderstore()
	if err != nil {
		return fail(stderr, exitUsage, withHint(err, "fix the file the key names (admin.token_file, password_file), or set the secret in the config"))
	}
	if err := cfg.CheckFiles(); err != nil {
		return fail(stderr, exitUsage, withHint(err, "fix the files the keys name: run would refuse to start the same way"))
	}
	if *print {
		fc.JetStream.Durability = cmp.Or(fc.JetStream.Durability, cfg.DurabilityMode()) // what "" chose
		b, err := fc.Encode()
		if err != nil {
			return fail(stderr, exitFailure, fmt.Errorf("encode config: %w", err))
		}
		stdout.Write(b)
	}
	// What the store holds: a change run would refuse (exit 2), checked even while a running
	// instance holds the store (its next start would refuse it).
	if err := orderstore.CheckStored(cfg); err != nil {
		return fail(stderr, exitCode(err), byKey(err, name))
	}
	fmt.Fprintf(stderr, "config %q is valid\n", name)
	slow, _ := cfg.SlowSchemas() // compiled above (CheckFiles)
	for _, typ := range slices.Sorted(maps.Keys(slow)) {
		fmt.Fprintf(stderr, "note: validation.schemas.%s (%s) is checked by the JSON Schema library alone (23 µs for a 1 KiB order where the fast check takes 1.1): the fast check does not take %s (docs/processor.md, \"Schemas\")\n",
			typ, cfg.Validation.Schemas[typ], slow[typ])
	}
	for _, w := range append(fc.SecretFileWarnings(name), cfg.PlaintextWarnings()...) {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}

	rep, err := orderstore.Preflight(cfg)
	switch {
	case errors.Is(err, orderstore.ErrLocked):
		// A running instance holds the store: that is not a config problem.
		fmt.Fprintf(stderr, "%v (a running instance; the other checks need the lock)\n", err)
		return exitOK
	case err != nil:
		return fail(stderr, exitFailure, err)
	}
	for _, w := range rep.Warnings {
		fmt.Fprintf(stderr, "preflight warning: %s\n", w)
	}
	policy, desc := cfg.DurabilityPolicy()
	fmt.Fprintf(stderr, "preflight ok: store_dir %q writable, free disk %s, used %s, max_file_store %s, durability %s (%s)\n",
		rep.StoreDir, config.ByteSize(rep.FreeBytes), config.ByteSize(rep.UsedBytes), fc.JetStream.MaxFileStore, policy, desc)
	return exitOK
}
