package orderstore

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
	// Retention removes the first blocks; a removed last block is skipped.
	os.Remove(filepath.Join(dir, "1.blk"))
	os.Remove(filepath.Join(dir, "3.blk"))
	round()
	if len(b.open) != 0 {
		t.Fatalf("open blocks %v after the last was removed", b.open)
	}
	if _, ok := blockIndex("12.blk.tmp"); ok {
		t.Fatal("a temporary file taken for a block")
	}
}
