package main

import (
	"archive/tar"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/internal/config"
	"github.com/orderstore/orderstore/internal/durable"
)

// backupCmd asks the running appliance for a backup (POST /v1/backup, a tar of JetStream snapshots)
// and writes it into DIR, then checks every file against the manifest; with -offline, it backs up
// the stopped store itself (orderstore.BackupOffline).
func backupCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("backup", stderr)
	client := clientFlags(fs)
	offline := fs.Bool("offline", false, "back up the store of -config with orderstore stopped (it takes the store's lock): nothing acknowledged is left out")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() != 1 {
		return usageErr(stderr, "usage: orderstore backup [-config FILE] [-admin URL] [-token T] DIR\n       orderstore backup -offline [-config FILE] DIR\n")
	}
	dir := fs.Arg(0)
	entries, err := os.ReadDir(dir)
	if err == nil && len(entries) > 0 {
		return fail(stderr, exitUsage, withHint(fmt.Errorf("backup: %q is not empty", dir), "pass a new or empty directory"))
	}
	created := errors.Is(err, os.ErrNotExist) // else an empty directory: what it holds is the backup's
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	t0 := time.Now()
	var received atomic.Int64
	if *offline {
		fc, _, err := loadConfig(fs.Lookup("config").Value.String())
		if err != nil {
			return fail(stderr, exitUsage, err)
		}
		cfg, err := fc.Orderstore()
		if err != nil {
			return fail(stderr, exitUsage, err)
		}
		stop := progressLine(stderr, func() string { return fmt.Sprintf("backup: %s saved", config.ByteSize(received.Load())) })
		saved := map[string]int64{} // by stream
		_, err = orderstore.BackupOffline(ctx, cfg, dir, func(p orderstore.BackupProgress) {
			received.Add(p.BytesReceived - saved[p.Stream])
			saved[p.Stream] = p.BytesReceived
		})
		if stop(); err != nil && ctx.Err() != nil {
			return interrupted(stderr, dir, created)
		}
		if err != nil {
			return fail(stderr, exitCode(err), err)
		}
	} else {
		c, err := client()
		if err != nil {
			return fail(stderr, exitUsage, err)
		}
		bc := *c
		bc.hc = &http.Client{Transport: c.hc.Transport} // no timeout: a backup takes as long as it takes
		var untarErr error
		err = bc.send(ctx, http.MethodPost, "/v1/backup", nil, func(r io.Reader) error {
			defer progressLine(stderr, func() string {
				return fmt.Sprintf("backup: %s received (%s)", config.ByteSize(received.Load()), time.Since(t0).Round(time.Second))
			})() // stopped once the tar is read
			untarErr = untar(&countingReader{r: r, n: &received}, dir)
			return untarErr
		})
		if err != nil && ctx.Err() != nil {
			return interrupted(stderr, dir, created)
		}
		if untarErr != nil {
			err = fmt.Errorf("%w (the backup in %q is incomplete)", err, dir)
		}
		if err != nil {
			return fail(stderr, exitFailure, fmt.Errorf("backup: %w", err))
		}
	}
	m, err := orderstore.ReadBackupManifest(dir)
	if err != nil {
		return fail(stderr, exitFailure, err)
	}
	for _, s := range m.Streams {
		fmt.Fprintf(stdout, "%s\t%d messages, seq %d..%d, %s\n", s.Name, s.Messages, s.FirstSeq, s.LastSeq, config.ByteSize(s.Bytes))
	}
	fmt.Fprintf(stderr, "backup complete: %q, %s in %s; checksums verified\n", dir, config.ByteSize(received.Load()), time.Since(t0).Round(time.Millisecond))
	return exitOK
}

// interrupted removes what a backup interrupted by a signal wrote: dir when it created it, else
// what it wrote into it (empty before), so that no partial backup is left for a restore.
func interrupted(stderr io.Writer, dir string, created bool) int {
	var err error
	if created {
		err = os.RemoveAll(dir)
	} else {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			err = errors.Join(err, os.RemoveAll(filepath.Join(dir, e.Name())))
		}
	}
	if err != nil {
		return fail(stderr, exitFailure, withHint(fmt.Errorf("backup interrupted; %q holds a partial backup: %w", dir, err), "remove it: no restore takes it"))
	}
	fmt.Fprintf(stderr, "backup interrupted; removed partial %s\n", dir)
	return exitFailure
}

// restoreCmd restores a backup into the config's (empty) store, with the appliance stopped.
func restoreCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("restore", stderr)
	configPath := fs.String("config", "", "config file (default: $ORDERSTORE_CONFIG, else built-in defaults)")
	backupKey := fs.String("backup-key-file", "", "the key a sealed backup was made with, when it is not the config's (a new key, or a plain store)")
	decrypt := fs.Bool("decrypt", false, "restore a sealed backup into a store with no encryption key: every order in plain text")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() != 1 {
		return usageErr(stderr, "usage: orderstore restore [-config FILE] [-backup-key-file FILE] [-decrypt] DIR\n")
	}
	opts := orderstore.RestoreOptions{Decrypt: *decrypt}
	if *backupKey != "" {
		k, err := config.ReadKeyFile("-backup-key-file", *backupKey)
		if err != nil {
			return fail(stderr, exitUsage, err)
		}
		opts.BackupKey = k
	}
	fc, _, err := loadConfig(*configPath)
	if err != nil {
		return fail(stderr, exitUsage, err)
	}
	cfg, err := fc.Orderstore()
	if err != nil {
		return fail(stderr, exitUsage, err)
	}
	t0 := time.Now()
	var cur atomic.Pointer[orderstore.BackupProgress]
	stop := progressLine(stderr, func() string {
		if p := cur.Load(); p != nil {
			return fmt.Sprintf("restore: %s: %s of %s sent (%s)", p.Stream, config.ByteSize(p.BytesReceived), config.ByteSize(p.BytesTotal), time.Since(t0).Round(time.Second))
		}
		return "restore: starting"
	})
	opts.Progress = func(p orderstore.BackupProgress) { cur.Store(&p) }
	m, err := orderstore.RestoreWith(ctx, cfg, fs.Arg(0), opts)
	stop()
	if err != nil {
		return fail(stderr, either(errors.Is(err, orderstore.ErrLocked), exitFailure, exitCode(err)), err)
	}
	for _, s := range m.Streams {
		fmt.Fprintf(stdout, "%s\t%d messages, seq %d..%d\n", s.Name, s.Messages, s.FirstSeq, s.LastSeq)
	}
	fmt.Fprintf(stderr, "restore complete into %q in %s; start orderstore to resume (the processor re-reads the stream: what the backed-up one settled, applied or dead-lettered, it acks unhandled)\n",
		cfg.JetStream.StoreDir, time.Since(t0).Round(time.Millisecond))
	return exitOK
}

// progressLine prints line() every 2 seconds until stop is called.
func progressLine(w io.Writer, line func() string) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintln(w, line())
			}
		}
	}()
	return func() { close(done); <-finished }
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// untar writes a tar stream's regular files under dir, refusing any path that would leave it.
func untar(r io.Reader, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			// Every file, directory and the backup's own name durable.
			return errors.Join(durable.SyncTree(dir), durable.SyncDir(filepath.Dir(dir)))
		}
		if err != nil {
			return err
		}
		name := filepath.FromSlash(h.Name)
		if h.Typeflag != tar.TypeReg || filepath.IsAbs(name) || !filepath.IsLocal(name) {
			return fmt.Errorf("unexpected entry %q in the backup", h.Name)
		}
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, tr)
		if err = cmp.Or(err, f.Close()); err != nil { // closed either way
			return err
		}
	}
}
