package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/embedded/embeddedtest"
)

// Ctrl-C stops `orderstore backup` mid-way: it exits 1, says so, and leaves no partial backup for
// a restore to refuse later. A directory it made is removed; an empty one it was given is kept,
// emptied.
func TestBackupInterrupted(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, dir, filepath.Join(dir, "store"), "[admin]\nlisten = \"127.0.0.1:0\"\n")
	p := start(t, nil, "run", "-config", cfg)
	url := p.waitReady()
	relay := stallingRelay(t, strings.TrimPrefix(p.adminURL(t), "http://"), 64<<10)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	note := make([]byte, 768)
	for i := range 300 { // about 300 KiB of snapshots: more than the relay passes
		rand.Read(note)
		if _, err := js.Publish(context.Background(), "orders.created", fmt.Appendf(nil, `{"order_id":"k-%d","note":%q}`, i, base64.StdEncoding.EncodeToString(note))); err != nil {
			t.Fatal(err)
		}
	}
	nc.Close()
	for _, made := range []bool{true, false} {
		bdir := filepath.Join(dir, fmt.Sprint("backup-made-", made))
		if !made {
			if err := os.Mkdir(bdir, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		code, out := interruptBackup(t, relay, bdir)
		if code != exitFailure || !strings.Contains(out, "backup interrupted; removed partial "+bdir+"\n") {
			t.Errorf("interrupted backup into %s = exit %d, want %d and a message saying so:\n%s", bdir, code, exitFailure, out)
		}
		entries, err := os.ReadDir(bdir)
		if made && !errors.Is(err, fs.ErrNotExist) || !made && (err != nil || len(entries) != 0) {
			t.Errorf("after the interrupted backup, %s holds %v (%v); want it removed (made: %t) or empty", bdir, entries, err, made)
		}
	}
	p.signal(syscall.SIGTERM)
	p.wait(30 * time.Second)
}

// interruptBackup runs `orderstore backup` into dir through relay, sends it SIGINT once it wrote a
// file, and returns its exit code and output.
func interruptBackup(t *testing.T, relay, dir string) (int, string) {
	t.Helper()
	for {
		p := start(t, nil, "backup", "-admin", relay, dir)
		exited := false
		embeddedtest.WaitFor(t, 30*time.Second, func() error {
			select {
			case <-p.done:
				exited = true
				return nil
			default:
			}
			found := false
			filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
				found = found || err == nil && d.Type().IsRegular()
				return nil
			})
			if !found {
				return errors.New("no file in the backup yet")
			}
			return nil
		})
		if !exited {
			p.signal(syscall.SIGINT)
			return p.wait(30 * time.Second), p.stderr.String()
		}
		if !strings.Contains(p.stderr.String(), "already running") { // else the last one's end is still on its way
			t.Fatalf("backup exited %d before it wrote a file:\n%s", p.code, p.stderr)
		}
	}
}

// stallingRelay forwards connections to addr, and of each answer only its first n bytes: a link
// that stalls. A connection is closed once its client closes it.
func stallingRelay(t *testing.T, addr string, n int64) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			go io.CopyN(c, u, n)
			go func() { io.Copy(u, c); u.Close(); c.Close() }()
		}
	}()
	return "http://" + ln.Addr().String()
}
