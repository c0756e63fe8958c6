package orderstore

import (
	"cmp"
	"context"
	"fmt"
	"net"

	"github.com/orderstore/orderstore/admin"
	"github.com/orderstore/orderstore/bootstrap"
	"github.com/orderstore/orderstore/internal/natsconf"
	"github.com/orderstore/orderstore/internal/natsrun"
	"github.com/orderstore/orderstore/natsserver/server"
	"github.com/orderstore/orderstore/status"
)

// startAdmin builds the admin handler (readiness is served from it even
// when the listener is disabled) and, unless Admin.Listen is "", listens.
func (a *Appliance) startAdmin(context.Context) error {
	cfg := a.cfg
	durable := ""
	if cfg.Processor.Enabled {
		durable = cfg.Processor.Durable
	}
	policy, desc := cfg.DurabilityPolicy()
	// The names a request's Host may carry besides IP addresses and localhost: allowed_hosts, and
	// the name in admin.listen if it is one.
	hosts := append([]string(nil), cfg.Admin.AllowedHosts...)
	if h, _, err := net.SplitHostPort(cfg.Admin.Listen); err == nil && h != "" && net.ParseIP(h) == nil {
		hosts = append(hosts, h)
	}
	build := cfg.Build
	for _, f := range []*string{&build.Version, &build.Commit, &build.Date, &build.GoVersion} {
		*f = cmp.Or(*f, "unknown")
	}
	build.NATSServer = cmp.Or(build.NATSServer, server.VERSION)
	a.admin = admin.New(admin.Config{
		Token:            cfg.Admin.Token,
		AllowedHosts:     hosts,
		Stream:           cfg.Stream.Name,
		ConsumerStream:   a.spec.ConsumerStream(),
		Subjects:         cfg.Stream.Subjects,
		MaxEventBytes:    int64(cfg.Stream.MaxMsgSize),
		Durable:          durable,
		DeadLetterStream: cfg.Processor.DeadLetterStream,
		ProjectionBucket: cfg.Processor.ProjectionBucket,
		MaxBytes:         cfg.Stream.MaxBytes,
		MaxMsgs:          cfg.Stream.MaxMsgs,
		MaxAge:           cfg.Stream.MaxAge,
		SyncPolicy:       policy,
		SyncDescription:  desc,
		Cipher:           cipherOf(cfg.JetStream),
		StaleAfter:       cfg.Processor.StaleAfter,
		StoreDir:         a.report.StoreDir,
		FreeBytes:        func() (uint64, error) { return bootstrap.FreeBytes(a.report.StoreDir) },
		DiskHeadroom:     cfg.JetStream.DiskHeadroom,
		MaxStore:         cfg.JetStream.MaxFileStore,
		Build:            build,
		Monitoring:       natsrun.Monitoring(a.monitored.Load),
		Logger:           a.log.With("component", "admin"),
	})
	if cfg.Admin.Listen == "" {
		return nil
	}
	tcfg, err := natsconf.LoadTLS("admin.tls", cfg.Admin.TLS, false)
	if err != nil {
		return err
	}
	l, err := admin.Listen(a.admin, admin.ListenConfig{Addr: cfg.Admin.Listen, TLS: tcfg,
		ReadTimeout: cfg.Admin.ReadTimeout, WriteTimeout: cfg.Admin.WriteTimeout, IdleTimeout: cfg.Admin.IdleTimeout,
		Log: a.log.With("component", "admin")})
	if err != nil {
		return WithHint(fmt.Errorf("admin listener %s: %w", cfg.Admin.Listen, err),
			fmt.Sprintf("another process listens on %s; stop it or set admin.listen (\"\" disables the admin listener)", cfg.Admin.Listen))
	}
	a.adminLn = l
	a.sup.add(component{name: "admin listener " + cfg.Admin.Listen,
		run: watch(l.Served(), l.Err),
		// After the intake's graceful shutdown this closes nothing more;
		// after a failed start it closes the listener and its connections.
		stop: func(context.Context) error { return l.Close() }})
	a.log.Info("admin listening", "addr", l.Addr().String(), "token", cfg.Admin.Token != "", "tls", tcfg != nil)
	return nil
}

// openAdmin gives the admin API its backend; the admin listener's intake is the last component to
// start and the first to stop, but for admission's line (its waits answered, so that none holds the
// stop): Close stops it taking requests and finishes those in flight before anything else stops.
func (a *Appliance) openAdmin(context.Context) error {
	b := admin.Backend{NotFound: ErrNotFound, JS: a.js, DeadLetters: a, Orders: a, History: a, Validation: a.validationStats, ConfigReload: a.reload.Load, Checks: a.checks, Recovery: a.rc.Notes(), Topology: a.topology, Backup: a.backupTar,
		Publish: a.publishMsg, Guard: a.guardStats, Rebuild: a, RebuildCodes: rebuildCodes, OrderIndex: a.index}
	if c := a.commit; c != nil {
		b.Ingest = func() *status.IngestStats {
			st := c.Status()
			st.Waiting = a.admit.Counts().Waiting
			_, d := a.syncInFlight()
			st.SyncInFlightSeconds = d.Seconds()
			return st
		}
	}
	if a.proc != nil {
		b.Processor = a
	}
	a.admin.SetBackend(b)
	if l := a.adminLn; l != nil {
		a.sup.add(component{name: "admin intake", stop: l.Shutdown})
	}
	a.sup.add(component{name: "admission's line", stop: func(context.Context) error { a.admit.Stop(); return nil }})
	return nil
}
