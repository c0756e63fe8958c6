package ingest

import (
	"os"
	"path/filepath"
	"testing"
)

// The fast round takes the block that was last when the round before began
// and every newer one, follows a block nats replaced by a new file
// (compaction), and forgets blocks behind the last.
func TestBlockSyncerFollowsBlocks(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b := &blockSyncer{dir: dir, open: map[uint64]*os.File{}}
	defer b.closeAll()
	round := func() {
		t.Helper()
		if err := b.refresh(); err != nil {
			t.Fatal(err)
		}
		if err := b.sync(); err != nil {
			t.Fatal(err)
		}
	}
	write("1.blk", "a")
	write("index.db", "x") // not a block
	round()
	if b.last != 0 || b.cur != 1 || b.dirSeen != 1 || len(b.open) != 1 {
		t.Fatalf("after the first round: last %d cur %d dirSeen %d open %d", b.last, b.cur, b.dirSeen, len(b.open))
	}
	write("2.blk", "b")
	write("3.blk", "c")
	round()
	if b.last != 1 || b.cur != 3 || b.dirSeen != 3 {
		t.Fatalf("after new blocks: last %d cur %d dirSeen %d", b.last, b.cur, b.dirSeen)
	}
	if _, ok := b.open[3]; !ok || len(b.open) != 1 {
		t.Fatalf("open blocks %v, want only the last", b.open)
	}
	old := b.open[3]
	// nats compacts block 3: a new file renamed over it.
	write("3.blk.tmp", "c2")
	if err := os.Rename(filepath.Join(dir, "3.blk.tmp"), filepath.Join(dir, "3.blk")); err != nil {
		t.Fatal(err)
	}
	round()
	fst, _ := b.open[3].Stat()
	st, _ := os.Stat(filepath.Join(dir, "3.blk"))
	if b.open[3] == old || !os.SameFile(fst, st) {
		t.Fatal("the round kept the replaced block's descriptor")
	}
	// Retention removes the first block; nats removes an empty last
	// block when it recovers, and the one before is the last again: the
	// round syncs it and the directory.
	os.Remove(filepath.Join(dir, "1.blk"))
	os.Remove(filepath.Join(dir, "3.blk"))
	round()
	if _, ok := b.open[2]; !ok || len(b.open) != 1 || b.cur != 2 || b.last != 2 || b.dirSeen != 2 {
		t.Fatalf("after the last block went: open %v, last %d cur %d dirSeen %d", b.open, b.last, b.cur, b.dirSeen)
	}
	// A block of a removed index made again: its entry is synced.
	write("3.blk", "d")
	round()
	if b.cur != 3 || b.dirSeen != 3 {
		t.Fatalf("after block 3 came back: cur %d dirSeen %d", b.cur, b.dirSeen)
	}
	// msgs/ replaced (a purge): the next round must be full.
	os.RemoveAll(dir)
	os.Mkdir(dir, 0o755)
	write("1.blk", "e")
	round()
	if !b.takeNeedFull() || b.takeNeedFull() {
		t.Fatal("a replaced msgs/ did not ask for one full round")
	}
	if _, ok := blockIndex("12.blk.tmp"); ok {
		t.Fatal("a temporary file taken for a block")
	}
}

func TestSubjectMatches(t *testing.T) {
	for _, c := range []struct {
		pattern, subject string
		want             bool
	}{
		{"orders.>", "orders.created", true},
		{"orders.>", "orders.a.b", true},
		{"orders.>", "orders", false},
		{"orders.*", "orders.created", true},
		{"orders.*", "orders.a.b", false},
		{"orders.created", "orders.created", true},
		{"orders.created", "orders.paid", false},
		{"orders.>", "other.created", false},
		{"orders.*.x", "orders..x", false},
	} {
		if got := subjectMatches(c.pattern, c.subject); got != c.want {
			t.Errorf("subjectMatches(%q, %q) = %v", c.pattern, c.subject, got)
		}
	}
}
