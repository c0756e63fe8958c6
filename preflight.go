package orderstore

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/orderstore/orderstore/natsserver/server"

	"github.com/orderstore/orderstore/bootstrap"
	"github.com/orderstore/orderstore/internal/natsconf"
	"github.com/orderstore/orderstore/internal/storedir"
)

// PreflightReport is what [Preflight] found: the absolute store directory, its free disk, what
// JetStream already uses, and the warnings let through by AllowLowDisk.
type PreflightReport = bootstrap.Report

// DriftError is a difference between cfg and a stream, bucket or consumer already stored that
// [Start] refuses to apply: it would lose data or change semantics; it names every difference.
type DriftError = bootstrap.DriftError

// ErrLocked is matched (errors.Is) when another live process holds the store directory.
var ErrLocked = bootstrap.ErrLocked

// Preflight runs start-up's checks without starting anything, like `orderstore check`: cfg is
// valid, the TLS certificates load, the store directory exists (it is created) and is writable, the
// disk has room, and no other process holds the store (the lock is taken and released at once).
func Preflight(cfg Config) (PreflightReport, error) {
	if err := cfg.Validate(); err != nil {
		return PreflightReport{}, err
	}
	if _, err := natsconf.LoadTLS("server.tls", cfg.Server.TLS, false); err != nil {
		return PreflightReport{}, err
	}
	if _, err := natsconf.LoadTLS("admin.tls", cfg.Admin.TLS, false); err != nil {
		return PreflightReport{}, err
	}
	lock, rep, err := bootstrap.Preflight(cfg.preflightConfig())
	if err != nil {
		return rep, err
	}
	return rep, lock.Release()
}

// CheckStored compares cfg with what its store already holds (the streams', the consumer's and the
// bucket's stored configs, read from the store directory without starting nats; a running instance
// may hold it): every change Start would refuse as a *[DriftError], joined. A new store, or an
// object it does not hold yet, passes. `orderstore check` runs it: check refuses what run refuses.
func CheckStored(cfg Config) error {
	dir, err := filepath.Abs(cfg.JetStream.StoreDir)
	if err != nil {
		return err
	}
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		return WithHint(&ValidationError{Problems: []*FieldError{{Field: "JetStream.StoreDir", Key: "jetstream.store_dir",
			Value: fmt.Sprintf("%q", dir), Reason: "is not a directory"}}}, "point jetstream.store_dir at a directory")
	}
	// The key, as Start checks it first (reading only).
	if _, err := storeKey(dir, cfg.JetStream); err != nil {
		return err
	}
	acct := storedir.Dir(dir).Account(StreamAccount)
	if _, err := os.Stat(filepath.Join(acct, "streams")); err != nil {
		// A store from before accounts: Start moves it, as it is.
		acct = storedir.Dir(dir).Account(legacyAccount)
	}
	return bootstrap.CheckStored(acct, cfg.DeclareSpec())
}

// NATSServerVersion is the version of the embedded nats-server.
const NATSServerVersion = server.VERSION
