package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/internal/config"
	"github.com/orderstore/orderstore/internal/sdnotify"
)

// stopTimeout bounds the graceful stop: the admin drain, the processor's
// drain and acks, the connection drain. It stays below the systemd unit's
// TimeoutStopSec (60s). nats' own shutdown is always waited for.
const stopTimeout = 50 * time.Second

// runCmd runs the appliance until a signal, ctx, or a failing part stops it.
func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("run", stderr)
	configPath := fs.String("config", "", "config file (default: $ORDERSTORE_CONFIG, else built-in defaults)")
	if !parseFlags(fs, args) {
		return exitUsage
	}

	// Signals cancel ctx from the first moment: a SIGTERM during a long stream recovery aborts
	// start-up cleanly, and one that lands at any later moment stops the appliance (a canceled ctx
	// stays canceled, so no signal can be lost between start-up and running).
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// SIGHUP reloads [validation] from the config file once the appliance runs: the schemas apply
	// from the next publish. One during start-up waits for it (Go's default for it is to exit).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	fc, cfgName, err := loadConfig(*configPath)
	if err != nil {
		return fail(stderr, exitUsage, err)
	}
	logger := newLogger(stderr, fc.Log.Level, fc.Log.Format)
	bi := getBuildInfo()
	logger.Info("orderstore starting", "version", bi.Version, "config", cfgName, "pid", os.Getpid())
	cfg, err := fc.Orderstore()
	if err != nil {
		return fail(stderr, exitUsage, withHint(err, "fix the file the key names (admin.token_file, password_file), or set the secret in the config"))
	}
	cfg.Logger, cfg.Build = logger, bi
	for _, w := range fc.SecretFileWarnings(cfgName) {
		logger.Warn("secret readable by every user", "warning", w)
	}

	sdnotify.Status("recovering streams")
	app, err := orderstore.Start(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			sig, _ := signalName(ctx)
			logger.Info("start-up interrupted by signal, shutdown complete", "signal", sig, "cause", context.Cause(ctx).Error())
			return exitOK
		}
		return fail(stderr, exitCode(err), byKey(err, cfgName))
	}
	if err := sdnotify.Ready(); err != nil {
		logger.Warn("sd_notify", "err", err)
	}

	go func() {
		for range hup {
			reloadValidation(app, *configPath, logger)
		}
	}()

	var failed error
	select {
	case <-ctx.Done():
		if sig, ok := signalName(ctx); ok {
			logger.Info("signal received, shutting down", "signal", sig)
		} else {
			logger.Info("shutting down", "cause", context.Cause(ctx).Error())
		}
	case <-app.Done():
		failed = app.Wait()
	}
	sdnotify.Stopping()
	cctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := errors.Join(failed, app.Close(cctx)); err != nil {
		return fail(stderr, exitFailure, err)
	}
	logger.Info("shutdown complete")
	return exitOK
}

// signalName is the signal that canceled ctx, as signal.NotifyContext
// states it in the cause ("terminated signal received").
func signalName(ctx context.Context) (string, bool) {
	cause := context.Cause(ctx)
	if cause == nil {
		return "", false
	}
	return strings.CutSuffix(cause.Error(), " signal received")
}

// byKey restates a config problem Start found (a node name another node of the cluster has) by the
// file's keys, naming the file, instead of the Go fields a library caller sets.
func byKey(err error, cfgName string) error {
	var invalid *orderstore.ValidationError
	if !errors.As(err, &invalid) {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "config %s: %d problem%s", cfgName, len(invalid.Problems), either(len(invalid.Problems) != 1, "s", ""))
	for _, p := range invalid.Problems {
		fe := orderstore.FieldError{Key: cmp.Or(config.KeyOf(p.Field), p.Field), Value: p.Value, Reason: p.Reason}
		b.WriteString("\n  " + fe.Error())
	}
	hint := cmp.Or(hintOf(err), "fix the keys named above in "+cfgName+", then start again (orderstore check -config FILE checks a file)")
	return &exitCoded{withHint(errors.New(b.String()), hint), err}
}

// exitCoded is an error restated for the operator that keeps the exit code of the one it restates.
type exitCoded struct {
	error
	orig error
}

func (e *exitCoded) Unwrap() []error { return []error{e.error, e.orig} }

// exitCode is 2 for what the operator must fix in the config (an invalid
// value, a destructive change to a stored stream), else 1.
func exitCode(err error) int {
	_, drift := errors.AsType[*orderstore.DriftError](err)
	_, invalid := errors.AsType[*orderstore.ValidationError](err)
	_, file := errors.AsType[*orderstore.FileError](err)
	return either(drift || invalid || file || errors.Is(err, orderstore.ErrEncryption), exitUsage, exitFailure)
}

// reloadValidation reads the config file again and applies its [validation] to the running
// appliance (SIGHUP). A file or schema that does not load leaves the running validation as it is,
// and shows in /readyz and /metrics until a reload succeeds.
func reloadValidation(app *orderstore.Appliance, configPath string, logger *slog.Logger) {
	fc, name, err := loadConfig(configPath)
	if err != nil {
		app.ReloadFailed(err)
		logger.Error("SIGHUP: the config file does not load; validation unchanged", "config", name, "err", err)
		return
	}
	if err := app.SetValidation(fc.Validation); err != nil {
		app.ReloadFailed(fmt.Errorf("config %q [validation]: %w", name, err))
		logger.Error("SIGHUP: the schemas do not compile; validation unchanged", "config", name, "err", err)
		return
	}
	logger.Info("SIGHUP: validation reloaded from the config file (other changes need a restart)", "config", name, "schemas", len(fc.Validation.Schemas))
}
