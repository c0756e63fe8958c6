// Modified by orderstore: this file differs from github.com/nats-io/nats-server/v2@v2.15.3
// (patches: 0001-group-commit.patch; see natsserver/README.md).

// Copyright 2026 The orderstore Authors
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
// http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// gcServer starts a standalone server with group commit and a stream
// ORDERS (orders.>) on a file store; the server is shut down at cleanup.
func gcServer(t *testing.T, edit func(*Options)) (*Server, *nats.Conn) {
	t.Helper()
	o := &Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, JetStream: true,
		StoreDir: t.TempDir(), GroupCommit: true}
	if edit != nil {
		edit(o)
	}
	s, err := NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.AddStream(&nats.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Storage: nats.FileStorage}); err != nil {
		t.Fatal(err)
	}
	return s, nc
}

func gcStore(t *testing.T, s *Server, stream string) *fileStore {
	t.Helper()
	acc := s.GlobalAccount()
	mset, err := acc.lookupStream(stream)
	if err != nil {
		t.Fatal(err)
	}
	fs, ok := mset.store.(*fileStore)
	if !ok {
		t.Fatalf("stream %s has a %T", stream, mset.store)
	}
	return fs
}

// gcHold installs a sync hook that holds every round of stream until
// release is called, and reports each round it holds on entered.
func gcHold(t *testing.T, stream string) (entered <-chan struct{}, release func()) {
	return gcHoldRounds(t, stream, 0)
}

// gcHoldRounds is gcHold for the rounds that took at least minAcks acks;
// the others go on.
func gcHoldRounds(t *testing.T, stream string, minAcks int) (entered <-chan struct{}, release func()) {
	t.Helper()
	in := make(chan struct{}, 1024)
	gate := make(chan struct{})
	var once sync.Once
	gcTestBeforeSync = func(name string, acks int) error {
		if name == stream && acks >= minAcks {
			in <- struct{}{}
			<-gate
		}
		return nil
	}
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	return in, release
}

func gcResetHooks(t *testing.T) {
	t.Helper()
	gcTestBeforeSync = nil
	t.Cleanup(func() { gcTestBeforeSync = nil })
}

func pubAckOf(t *testing.T, m *nats.Msg) JSPubAckResponse {
	t.Helper()
	var r JSPubAckResponse
	if err := json.Unmarshal(m.Data, &r); err != nil {
		t.Fatalf("ack %q: %v", m.Data, err)
	}
	return r
}

// Group commit is on for R1 file streams, KV buckets included, and off when
// sync_interval is always (which takes precedence) or the stream is in
// memory.
func TestGroupCommitWhichStores(t *testing.T) {
	gcResetHooks(t)
	s, nc := gcServer(t, nil)
	js, _ := nc.JetStream()
	if _, err := js.CreateKeyValue(&nats.KeyValueConfig{Bucket: "PROJ", Storage: nats.FileStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.AddStream(&nats.StreamConfig{Name: "MEM", Subjects: []string{"mem"}, Storage: nats.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ORDERS", "KV_PROJ"} {
		if gcStore(t, s, name).gc == nil {
			t.Errorf("stream %s: no group commit", name)
		}
	}
	if mset, _ := s.GlobalAccount().lookupStream("MEM"); mset == nil {
		t.Fatal("no MEM")
	} else if _, ok := mset.store.(*fileStore); ok {
		t.Error("MEM has a file store")
	}

	s2, _ := gcServer(t, func(o *Options) { o.SyncAlways = true })
	if fs := gcStore(t, s2, "ORDERS"); fs.gc != nil || !fs.syncAlways.Load() {
		t.Errorf("sync always: gc=%v syncAlways=%v, want no group commit", fs.gc != nil, fs.syncAlways.Load())
	}
	s3, _ := gcServer(t, func(o *Options) { o.GroupCommit = false })
	if gcStore(t, s3, "ORDERS").gc != nil {
		t.Error("GroupCommit off, yet the store has a committer")
	}
}

// An ack (a duplicate's too) is not sent before the round that syncs its
// event; once the round is done every ack arrives, the original's before
// its duplicate's.
func TestGroupCommitAckWaitsForSync(t *testing.T) {
	gcResetHooks(t)
	entered, release := gcHold(t, "ORDERS")
	s, nc := gcServer(t, nil)
	fs := gcStore(t, s, "ORDERS")

	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	pub := func(id string) {
		m := nats.NewMsg("orders.created")
		m.Reply = inbox
		m.Data = []byte(`{"order_id":"A-1"}`)
		m.Header.Set(JSMsgId, id)
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	pub("a")
	<-entered // the round holding a's ack (or a round before it) is held
	pub("a")  // its duplicate
	pub("b")
	// Both are stored or seen as duplicates, and parked behind the held round.
	for {
		var st StreamState
		fs.FastState(&st)
		fs.gc.mu.Lock()
		parked := len(fs.gc.acks)
		fs.gc.mu.Unlock()
		if st.Msgs == 2 && parked >= 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := sub.Pending(); n != 0 {
		t.Fatalf("%d acks arrived while their sync was held", n)
	}
	release()

	var got []string
	for i := 0; i < 3; i++ {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("ack %d: %v", i, err)
		}
		r := pubAckOf(t, m)
		if r.Error != nil {
			t.Fatalf("ack %d: %v", i, r.Error)
		}
		got = append(got, fmt.Sprintf("%d/%v", r.Sequence, r.Duplicate))
	}
	if want := "1/false 1/true 2/false"; strings.Join(got, " ") != want {
		t.Fatalf("acks %q, want %q", strings.Join(got, " "), want)
	}
}

// Many publishers share rounds, every publish is acked with its own
// sequence, and the stream holds each once.
func TestGroupCommitConcurrentPublishers(t *testing.T) {
	gcResetHooks(t)
	var rounds atomic.Int64
	gcTestBeforeSync = func(name string, acks int) error {
		if name == "ORDERS" {
			rounds.Add(1)
		}
		return nil
	}
	s, _ := gcServer(t, nil)
	const pubs, each = 16, 200
	var wg sync.WaitGroup
	seqs := make(chan uint64, pubs*each)
	errs := make(chan error, pubs)
	for p := 0; p < pubs; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := nats.Connect(s.ClientURL())
			if err != nil {
				errs <- err
				return
			}
			defer nc.Close()
			js, _ := nc.JetStream()
			for i := 0; i < each; i++ {
				a, err := js.Publish(fmt.Sprintf("orders.p%d", p), []byte("x"), nats.MsgId(fmt.Sprintf("%d-%d", p, i)))
				if err != nil {
					errs <- err
					return
				}
				seqs <- a.Sequence
			}
		}()
	}
	wg.Wait()
	close(errs)
	close(seqs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := map[uint64]bool{}
	for q := range seqs {
		if seen[q] {
			t.Fatalf("sequence %d acked twice", q)
		}
		seen[q] = true
	}
	if len(seen) != pubs*each {
		t.Fatalf("%d acks, want %d", len(seen), pubs*each)
	}
	var st StreamState
	gcStore(t, s, "ORDERS").FastState(&st)
	if st.Msgs != pubs*each {
		t.Fatalf("stream holds %d, want %d", st.Msgs, pubs*each)
	}
	if rounds.Load() == 0 {
		t.Fatal("no group commit round ran")
	}
	t.Logf("%d acks in %d rounds", pubs*each, rounds.Load())
}

// A failed sync is final: the acks it held and every later publish get an
// error, nothing is acked after it, the store refuses writes, and
// GroupCommitError is called once.
func TestGroupCommitFailedSyncIsFinal(t *testing.T) {
	gcResetHooks(t)
	var fail atomic.Bool
	eio := errors.New("input/output error (injected)")
	gcTestBeforeSync = func(name string, acks int) error {
		if name == "ORDERS" && fail.Load() {
			return eio
		}
		return nil
	}
	var calls atomic.Int64
	var reported atomic.Value
	s, nc := gcServer(t, func(o *Options) {
		o.GroupCommitError = func(stream string, err error) { calls.Add(1); reported.Store(stream + ": " + err.Error()) }
	})
	js, _ := nc.JetStream()
	if _, err := js.Publish("orders.created", []byte("before")); err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	for i := 0; i < 3; i++ {
		_, err := js.Publish("orders.created", []byte("after"))
		var apiErr *nats.APIError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != nats.ErrorCode(ApiErrors[JSStreamStoreFailedF].ErrCode) {
			t.Fatalf("publish %d after the failed sync: %v, want a store failed error (%d)", i, err, ApiErrors[JSStreamStoreFailedF].ErrCode)
		}
	}
	fail.Store(false) // the disk "recovers": group commit must stay failed
	if _, err := js.Publish("orders.created", []byte("later")); err == nil {
		t.Fatal("a publish was acked after a failed sync")
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("GroupCommitError called %d times, want 1", n)
	}
	if r, _ := reported.Load().(string); !strings.Contains(r, "ORDERS") || !strings.Contains(r, "injected") {
		t.Fatalf("GroupCommitError got %q", r)
	}
	fs := gcStore(t, s, "ORDERS")
	fs.mu.RLock()
	werr := fs.werr
	fs.mu.RUnlock()
	if werr == nil {
		t.Fatal("the store's write error is not set")
	}
}

// A graceful shutdown with acks parked syncs, then answers them: none is
// dropped.
func TestGroupCommitShutdownAnswersParkedAcks(t *testing.T) {
	gcResetHooks(t)
	entered, release := gcHold(t, "ORDERS")
	s, nc := gcServer(t, nil)
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg("orders.created")
	m.Reply, m.Data = inbox, []byte("x")
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	<-entered
	stopped := make(chan struct{})
	go func() { s.Shutdown(); close(stopped) }()
	release()
	got, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no answer to a publish parked at shutdown: %v", err)
	}
	if r := pubAckOf(t, got); r.Error != nil || r.Sequence != 1 {
		t.Fatalf("answer %s, want an ack of sequence 1", got.Data)
	}
	<-stopped
}

// What was acked is in the block files when the server restarts (the
// round's sync happened; the restart reads the blocks back).
func TestGroupCommitAckedSurvivesRestart(t *testing.T) {
	gcResetHooks(t)
	dir := t.TempDir()
	s, nc := gcServer(t, func(o *Options) { o.StoreDir = dir })
	js, _ := nc.JetStream()
	for i := 0; i < 100; i++ {
		if _, err := js.Publish("orders.created", []byte(fmt.Sprintf("%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	nc.Close()
	s.Shutdown()
	s.WaitForShutdown()
	blks, _ := filepath.Glob(filepath.Join(dir, JetStreamStoreDir, globalAccountName, streamsDir, "ORDERS", msgDir, "*.blk"))
	if len(blks) == 0 {
		t.Fatal("no block files")
	}
	for _, b := range blks {
		if _, err := os.Stat(b); err != nil {
			t.Fatal(err)
		}
	}

	s2, err := NewServer(&Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, JetStream: true, StoreDir: dir, GroupCommit: true})
	if err != nil {
		t.Fatal(err)
	}
	s2.Start()
	defer func() { s2.Shutdown(); s2.WaitForShutdown() }()
	if !s2.ReadyForConnections(10 * time.Second) {
		t.Fatal("not ready")
	}
	var st StreamState
	for deadline := time.Now().Add(10 * time.Second); ; {
		if mset, err := s2.GlobalAccount().lookupStream("ORDERS"); err == nil {
			mset.store.FastState(&st)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("stream not recovered")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st.Msgs != 100 || st.LastSeq != 100 {
		t.Fatalf("after restart: %d messages, last %d; want 100, 100", st.Msgs, st.LastSeq)
	}
}

// openFDs counts this process's open descriptors (/dev/fd: Linux, where
// group commit syncs through duplicated descriptors, and the BSDs).
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/dev/fd")
	if err != nil {
		t.Fatalf("cannot count open descriptors: %v", err)
	}
	return len(ents)
}

// A round syncs each block through a duplicate of the descriptor its
// write went through, and closes it: many rounds leave no descriptor
// behind, and a block removed (by a purge) before its round is synced
// through the duplicate without an error.
func TestGroupCommitClosesItsDescriptors(t *testing.T) {
	gcResetHooks(t)
	var rounds atomic.Int64
	var hold atomic.Bool
	entered := make(chan struct{}, 1)
	gate := make(chan struct{})
	gcTestBeforeSync = func(name string, acks int) error {
		if name != "ORDERS" {
			return nil
		}
		rounds.Add(1)
		if hold.CompareAndSwap(true, false) {
			entered <- struct{}{}
			<-gate
		}
		return nil
	}
	s, nc := gcServer(t, nil)
	js, _ := nc.JetStream()
	if _, err := js.Publish("orders.created", []byte("first")); err != nil {
		t.Fatal(err)
	}
	base, before := openFDs(t), rounds.Load()
	for i := 0; i < 500; i++ {
		if _, err := js.Publish("orders.created", []byte(fmt.Sprintf("%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if n := rounds.Load() - before; n < 100 {
		t.Fatalf("%d rounds for 500 acked publishes one at a time", n)
	}
	if now := openFDs(t); now > base+8 {
		t.Fatalf("%d descriptors open after 500 rounds, %d before: the rounds leak them", now, base)
	}

	// The next round is held with a write in it; the stream is purged
	// (its block files removed) meanwhile.
	hold.Store(true)
	fut, err := js.PublishAsync("orders.created", []byte("held"))
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	if err := js.PurgeStream("ORDERS"); err != nil {
		t.Fatal(err)
	}
	close(gate)
	select {
	case a := <-fut.Ok():
		if a.Sequence != 502 {
			t.Fatalf("held publish acked as %d, want 502", a.Sequence)
		}
	case err := <-fut.Err():
		t.Fatalf("held publish: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("held publish not answered")
	}
	if err := gcStore(t, s, "ORDERS").gc.Err(); err != nil {
		t.Fatalf("group commit failed: %v", err)
	}
	if now := openFDs(t); now > base+8 {
		t.Fatalf("%d descriptors open at the end, %d before", now, base)
	}
}

// A record stored while a round syncs is not written at once: the next
// round writes what accumulated with one write, before its sync and before
// any of those acks go out.
func TestGroupCommitWritesWhatARoundLeft(t *testing.T) {
	gcResetHooks(t)
	entered, release := gcHold(t, "ORDERS")
	s, nc := gcServer(t, nil)
	fs := gcStore(t, s, "ORDERS")
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	pub := func(marker string) {
		if err := nc.PublishRequest("orders.created", inbox, []byte(`{"order_id":"`+marker+`"}`)); err != nil {
			t.Fatal(err)
		}
	}
	pub("first-0001")
	<-entered // the round of the first record syncs (held)
	pub("second-0002")
	pub("third-0003")
	for {
		var st StreamState
		fs.FastState(&st)
		if st.Msgs == 3 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	fs.mu.RLock()
	lmb := fs.lmb
	fs.mu.RUnlock()
	onDisk := func() string {
		t.Helper()
		b, err := os.ReadFile(lmb.mfn)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if n := lmb.pendingWriteSize(); n == 0 {
		t.Fatal("the records stored during the round's sync were written at once")
	}
	if d := onDisk(); strings.Contains(d, "second-0002") || !strings.Contains(d, "first-0001") {
		t.Fatalf("block file during the held round: first written %v, second written %v; want only the first",
			strings.Contains(d, "first-0001"), strings.Contains(d, "second-0002"))
	}
	release()
	for i := range 3 {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("ack %d: %v", i, err)
		}
		if r := pubAckOf(t, m); r.Error != nil || r.Sequence != uint64(i+1) {
			t.Fatalf("ack %d: %+v", i, r)
		}
		if i == 2 {
			if d := onDisk(); !strings.Contains(d, "second-0002") || !strings.Contains(d, "third-0003") {
				t.Fatal("the third ack arrived before its record was written to the block file")
			}
		}
	}
	if n := lmb.pendingWriteSize(); n != 0 {
		t.Fatalf("%d bytes still unwritten after every ack", n)
	}
}

// A record left for the next round whose write fails on another path (the
// next record's write, a tombstone's: nats drops the block's cache then)
// is not acknowledged: the round that would have written it answers with
// the error. A failed write is not final as a failed sync is (the store
// refuses writes, and is opened again once the disk has room).
func TestGroupCommitLeftRecordLostByAnotherWrite(t *testing.T) {
	gcResetHooks(t)
	// The round held is one that took the first ack: a round woken by the
	// first's write alone, before its ack was parked, goes on.
	entered, release := gcHoldRounds(t, "ORDERS", 1)
	s, nc := gcServer(t, nil)
	fs := gcStore(t, s, "ORDERS")
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.PublishRequest("orders.created", inbox, []byte(`{"order_id":"first"}`)); err != nil {
		t.Fatal(err)
	}
	<-entered
	if err := nc.PublishRequest("orders.created", inbox, []byte(`{"order_id":"left"}`)); err != nil {
		t.Fatal(err)
	}
	fs.mu.RLock()
	lmb := fs.lmb
	fs.mu.RUnlock()
	for lmb.pendingWriteSize() == 0 {
		time.Sleep(time.Millisecond)
	}
	// Another path writes the block and fails.
	lmb.mu.Lock()
	lmb.mockWriteErr = true
	_, ferr := lmb.flushPendingMsgsLocked()
	lmb.mu.Unlock()
	if ferr == nil {
		t.Fatal("the mocked write did not fail")
	}
	release()
	for i, want := range []bool{true, false} { // first: written before; left: lost
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		if r := pubAckOf(t, m); (r.Error == nil) != want {
			t.Fatalf("answer %d: %+v (error %v), want acknowledged=%v", i, r.PubAck, r.Error, want)
		}
	}
	if err := fs.gc.Err(); err != nil {
		t.Fatalf("a failed write ended group commit as a failed sync does: %v", err)
	}
}

// gcBucketStore is a group commit file store "KV" (k.>) that keeps one
// message per subject, as a KV bucket does, in blocks of blockSize bytes.
func gcBucketStore(t *testing.T, blockSize uint64) *fileStore {
	t.Helper()
	fs, err := newFileStore(FileStoreConfig{StoreDir: t.TempDir(), BlockSize: blockSize, GroupCommit: true},
		StreamConfig{Name: "KV", Subjects: []string{"k.>"}, Storage: FileStorage, MaxMsgsPer: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Stop() })
	return fs
}

// A block the limits empty keeps its file until a round has synced the
// record that replaced its last one: removed at once, any fsync of the
// file system could make the removal durable before the record, and a
// power cut then loses both revisions of the key (a projection record
// gone after a cut, found by orderstore's power-loss test on ext4).
func TestGroupCommitEmptiedBlockRemovedAfterSync(t *testing.T) {
	gcResetHooks(t)
	fs := gcBucketStore(t, 128)
	val := bytes.Repeat([]byte("v"), 60) // one record a block
	if _, _, err := fs.StoreMsg("k.a", nil, val, 0); err != nil {
		t.Fatal(err)
	}
	if err := fs.gc.flush(); err != nil {
		t.Fatal(err)
	}
	fs.mu.RLock()
	first := fs.lmb.mfn
	fs.mu.RUnlock()
	if _, err := os.Stat(first); err != nil {
		t.Fatalf("k.a's block: %v", err)
	}

	entered, release := gcHold(t, "KV")
	if _, _, err := fs.StoreMsg("k.b", nil, val, 0); err != nil {
		t.Fatal(err)
	}
	<-entered // a round syncs k.b's block and is held there
	if _, _, err := fs.StoreMsg("k.a", nil, val, 0); err != nil {
		t.Fatal(err)
	}
	var st StreamState
	fs.FastState(&st)
	if st.Msgs != 2 || st.FirstSeq != 2 {
		t.Fatalf("state %+v: want k.b and the new k.a (the old one removed by the limit)", st)
	}
	if _, err := os.Stat(first); err != nil {
		t.Fatalf("the emptied block's file went before a round synced the record that replaced its last: %v", err)
	}
	release()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := fs.gc.flush(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(first); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the emptied block's file is still there after a round synced")
		}
	}
}

// A block is not compacted without a record the limits removed until a
// round has synced the record that replaced it, for the same reason.
func TestGroupCommitCompactionWaitsForSync(t *testing.T) {
	gcResetHooks(t)
	fs := gcBucketStore(t, 256)
	old := append([]byte("OLD-A"), bytes.Repeat([]byte("a"), 145)...)
	for _, m := range []struct {
		subj string
		val  []byte
	}{{"k.a", old}, {"k.c", []byte("c")}} {
		if _, _, err := fs.StoreMsg(m.subj, nil, m.val, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := fs.gc.flush(); err != nil {
		t.Fatal(err)
	}
	fs.mu.RLock()
	first := fs.lmb.mfn
	fs.mu.RUnlock()

	entered, release := gcHold(t, "KV")
	if _, _, err := fs.StoreMsg("k.b", nil, bytes.Repeat([]byte("b"), 150), 0); err != nil {
		t.Fatal(err)
	}
	<-entered
	if _, _, err := fs.StoreMsg("k.a", nil, []byte("new"), 0); err != nil {
		t.Fatal(err)
	}
	holds := func() bool {
		b, err := os.ReadFile(first)
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Contains(b, []byte("OLD-A"))
	}
	fs.syncBlocks()
	if !holds() {
		t.Fatal("the block was compacted without the old k.a before a round synced the new one")
	}
	release()
	if err := fs.gc.flush(); err != nil {
		t.Fatal(err)
	}
	fs.syncBlocks()
	if holds() {
		t.Fatal("the block still holds the old k.a after a round synced the new one and the store compacted")
	}
}

// A new block never takes the index of a block whose file a round is still
// to remove (a truncate can bring the last block back below it): the
// removal would take the new block's file with it.
func TestGroupCommitNewBlockSkipsFileLeftToRemove(t *testing.T) {
	gcResetHooks(t)
	fs := gcBucketStore(t, 128)
	val := bytes.Repeat([]byte("v"), 60) // one record a block
	for _, subj := range []string{"k.a", "k.b"} {
		if _, _, err := fs.StoreMsg(subj, nil, val, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := fs.gc.flush(); err != nil {
		t.Fatal(err)
	}
	entered, release := gcHold(t, "KV")
	if _, _, err := fs.StoreMsg("k.c", nil, val, 0); err != nil {
		t.Fatal(err)
	}
	<-entered
	// k.b again: its first block (2) is emptied and left to the round.
	if _, _, err := fs.StoreMsg("k.b", nil, val, 0); err != nil {
		t.Fatal(err)
	}
	if err := fs.Truncate(1); err != nil { // back to k.a's block
		t.Fatal(err)
	}
	if _, _, err := fs.StoreMsg("k.d", nil, val, 0); err != nil {
		t.Fatal(err)
	}
	fs.mu.RLock()
	idx, mfn := fs.lmb.index, fs.lmb.mfn
	fs.mu.RUnlock()
	if idx <= 2 {
		t.Fatalf("k.d's block has index %d: a block whose file is left to the round had index 2", idx)
	}
	release()
	if err := fs.gc.flush(); err != nil {
		t.Fatal(err)
	}
	if err := fs.gc.flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mfn); err != nil {
		t.Fatalf("k.d's block file after the round removed what it was left: %v", err)
	}
	if sm, err := fs.LoadLastMsg("k.d", nil); err != nil || !bytes.Equal(sm.msg, val) {
		t.Fatalf("k.d: %v %v", sm, err)
	}
}
