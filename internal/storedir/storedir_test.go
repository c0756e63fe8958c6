package storedir

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The run marker tells a run that did not stop from one that did, and
// the sync interval it ran with.
func TestRunMarker(t *testing.T) {
	d := Dir(t.TempDir())
	if unclean, _, err := d.MarkRunning(1, time.Second); err != nil || unclean {
		t.Fatalf("first run: unclean %v, %v; want a clean start", unclean, err)
	}
	if unclean, last, err := d.MarkRunning(2, 0); err != nil || !unclean || last != time.Second {
		t.Fatalf("a run after one that did not stop: unclean %v, its sync interval %s, %v; want unclean, 1s", unclean, last, err)
	}
	if err := d.MarkStopped(); err != nil {
		t.Fatal(err)
	}
	if unclean, _, err := d.MarkRunning(3, 0); err != nil || unclean {
		t.Fatalf("a run after a clean stop: unclean %v, %v; want clean", unclean, err)
	}
	if err := d.MarkStopped(); err != nil {
		t.Fatal(err)
	}
	if err := d.MarkStopped(); err != nil {
		t.Fatalf("marking a stopped store stopped again: %v", err)
	}
}

// A store from before accounts moves once; one with streams in both
// accounts is left to the operator.
func TestMoveAccount(t *testing.T) {
	d := Dir(t.TempDir())
	mk := func(acct, stream string) {
		t.Helper()
		if err := os.MkdirAll(d.Stream(acct, stream), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if moved, err := d.MoveAccount("$G", "ORDERSTORE"); err != nil || moved {
		t.Fatalf("an empty store: moved %v, %v", moved, err)
	}
	mk("$G", "ORDER_EVENTS")
	if moved, err := d.MoveAccount("$G", "ORDERSTORE"); err != nil || !moved {
		t.Fatalf("a legacy store: moved %v, %v; want moved", moved, err)
	}
	if _, err := os.Stat(d.Stream("ORDERSTORE", "ORDER_EVENTS")); err != nil {
		t.Fatalf("the stream is not in its account: %v", err)
	}
	if moved, err := d.MoveAccount("$G", "ORDERSTORE"); err != nil || moved {
		t.Fatalf("again: moved %v, %v; want nothing moved", moved, err)
	}
	mk("$G", "OTHER")
	if _, err := d.MoveAccount("$G", "ORDERSTORE"); !errors.Is(err, ErrBothAccounts) {
		t.Fatalf("streams in both: %v, want ErrBothAccounts", err)
	}
	if filepath.Base(d.Msgs("A", "S")) != "msgs" || filepath.Base(filepath.Dir(d.Msgs("A", "S"))) != "S" {
		t.Fatalf("Msgs = %q", d.Msgs("A", "S"))
	}
}
