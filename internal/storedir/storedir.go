// Package storedir is the store directory's layout and the files orderstore keeps in it beside
// nats' own: where an account's streams live, the run marker that tells a crash from a clean stop,
// the move of a store written before accounts existed, and where what nats could not read is moved
// aside. Every file it writes survives a power cut (internal/durable).
package storedir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/orderstore/orderstore/internal/durable"
)

// Dir is an absolute store directory (jetstream.store_dir).
type Dir string

// JetStream is where nats keeps every account's streams.
func (d Dir) JetStream() string { return filepath.Join(string(d), "jetstream") }

// Account is where nats keeps account's streams and consumers.
func (d Dir) Account(account string) string { return filepath.Join(d.JetStream(), account) }

// Stream is where nats keeps stream name's files in account.
func (d Dir) Stream(account, name string) string {
	return filepath.Join(d.Account(account), "streams", name)
}

// Msgs is the directory of stream name's message blocks in account.
func (d Dir) Msgs(account, name string) string { return filepath.Join(d.Stream(account, name), "msgs") }

// MsgsSize is the size of stream name's message blocks in account (0: none, or unreadable).
func (d Dir) MsgsSize(account, name string) int64 {
	blks, _ := filepath.Glob(filepath.Join(d.Msgs(account, name), "*.blk"))
	var size int64
	for _, b := range blks {
		if st, err := os.Stat(b); err == nil {
			size += st.Size()
		}
	}
	return size
}

// Consumer is where nats keeps durable's files of stream name in account.
func (d Dir) Consumer(account, stream, durable string) string {
	return filepath.Join(d.Stream(account, stream), "obs", durable)
}

// Damaged is where MoveAside keeps what nats could not read: outside
// nats' tree, so that nats never loads it again.
func (d Dir) Damaged() string { return filepath.Join(string(d), "damaged") }

// MoveAside moves path (a stream's or consumer's directory nats could not read) to Damaged, named
// after its place in the store and the time, and returns where it went. The move survives a power
// cut (both directories are synced).
func (d Dir) MoveAside(path string, now time.Time) (string, error) {
	rel, err := filepath.Rel(d.JetStream(), path)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "", fmt.Errorf("store %q: %q is not in nats' directory", string(d), path)
	}
	if err := os.MkdirAll(d.Damaged(), 0o750); err != nil {
		return "", fmt.Errorf("store %q: %w", d.Damaged(), err)
	}
	to := filepath.Join(d.Damaged(), strings.ReplaceAll(rel, string(filepath.Separator), "_")+now.UTC().Format(".20060102T150405.000000000"))
	if err := os.Rename(path, to); err != nil {
		return "", fmt.Errorf("store: move %q to %q: %w", path, to, err)
	}
	if err := errors.Join(durable.SyncDir(filepath.Dir(path)), durable.SyncDir(d.Damaged()), durable.SyncDir(string(d))); err != nil {
		return to, fmt.Errorf("store: after moving %q to %q: %w", path, to, err)
	}
	return to, nil
}

// HasStreams reports whether account holds any stream.
func (d Dir) HasStreams(account string) bool {
	entries, _ := os.ReadDir(filepath.Join(d.Account(account), "streams"))
	return len(entries) > 0
}

// RunMarker is a file in the store directory that exists while an appliance runs: if it is there at
// start-up, the last run did not stop cleanly (a crash, a kill, a power cut).
const RunMarker = "orderstore.running"

// MarkRunning reports whether the last run stopped cleanly (unclean: it did not; last: its relaxed
// sync interval, 0 if none or unknown) and marks this one as running, with pid and interval. The
// marker is synced: it must survive the power cut it is there to detect.
func (d Dir) MarkRunning(pid int, interval time.Duration) (unclean bool, last time.Duration, err error) {
	path := filepath.Join(string(d), RunMarker)
	b, rerr := os.ReadFile(path)
	unclean = rerr == nil
	fmt.Sscan(string(b), new(int), &last) // an older marker holds the pid only
	if err := durable.WriteFile(path, fmt.Appendf(nil, "%d %d\n", pid, interval), 0o640); err != nil {
		return unclean, last, fmt.Errorf("preflight: run marker %q: %w", path, err)
	}
	return unclean, last, nil
}

// MarkStopped removes the marker after a clean stop, durably.
func (d Dir) MarkStopped() error {
	return removeFile(string(d), filepath.Join(string(d), RunMarker))
}

// ErrBothAccounts is returned by MoveAccount when both accounts hold
// streams: which to keep is an operator's decision.
var ErrBothAccounts = errors.New("streams in both accounts")

// MoveAccount moves account from's streams to account to, once, before nats starts (a store written
// before accounts existed keeps them in nats' global account). Nothing moves when from has none. A
// rename within one directory is atomic; the directory is synced: the move survives a power cut.
func (d Dir) MoveAccount(from, to string) (moved bool, err error) {
	old, cur := d.Account(from), d.Account(to)
	if _, err := os.Stat(old); errors.Is(err, os.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("store %q: %w", old, err)
	}
	if !d.HasStreams(from) {
		return false, nil // nothing of ours there (nats made the directory)
	}
	if d.HasStreams(to) {
		return false, fmt.Errorf("store %q: %q and %q: %w", string(d), old, cur, ErrBothAccounts)
	}
	if err := os.RemoveAll(cur); err != nil {
		return false, fmt.Errorf("store %q: %w", cur, err)
	}
	if err := os.Rename(old, cur); err != nil {
		return false, fmt.Errorf("store: move %q to %q: %w", old, cur, err)
	}
	if err := durable.SyncDir(d.JetStream()); err != nil {
		return true, fmt.Errorf("store %q: %w", d.JetStream(), err)
	}
	return true, nil
}
