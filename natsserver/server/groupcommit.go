// Modified by orderstore: this file differs from github.com/nats-io/nats-server/v2@v2.15.3
// (patches: 0001-group-commit.patch, 0022-sync-inflight-since.patch; see natsserver/README.md).

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
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nuid"
)

// groupCommit makes a file store's writes durable in rounds (orderstore's
// patch 0001-group-commit). The store skips the per-write sync; every
// PubAck is parked here instead of sent. A round takes every parked ack and
// every block written since the round before, syncs those blocks (and the
// msgs directory when a block file appeared) without holding a store lock,
// then sends the acks in the order they were parked. Writes and acks that
// arrive during a round wait for the next one, which starts as soon as this
// one ends: a lone writer waits one sync, and there is no timer.
//
// Invariant: a write registers its block (dirty) before its ack is parked,
// and a round syncs after it took the registrations, so every ack a round
// sends was covered by a sync of this round or of an earlier one.
//
// The first failed sync is final: the kernel may have dropped the pages it
// could not write, so no later sync can vouch for them. The store's write
// error is set (later writes fail), the acks of that round and every later
// one become errors, and Options.GroupCommitError is called once.
type groupCommit struct {
	fs   *fileStore
	name string // the stream's (fs.cfg is the store's to change)
	mdir string // the store's msgs directory

	mu      sync.Mutex
	cond    *sync.Cond         // signals a finished round
	acks    []gcAck            // parked, in store order
	dirty   map[uint32]gcBlock // block index -> its file, written since the last round
	dirSync bool               // a block file appeared since the last round
	err     error              // the first failed sync: final
	rounds  uint64             // rounds finished
	inRound bool
	stopped bool
	syncing atomic.Bool // a round took its blocks and syncs them: writes are left to the next round

	// Removals that must not reach the disk before what replaced them:
	// taken counts the rounds that took their work, synced is the count
	// of the latest round whose sync succeeded (covered), and unlink the
	// files of blocks the limits emptied, removed after the next round's
	// sync (fileStore.gcRemoveMsgBlock).
	taken, synced atomic.Uint64
	unlink        []string
	removedBelow  atomic.Uint32 // above the index of every block left to a round to remove: new blocks start here

	kick chan struct{} // capacity 1: work is waiting
	quit chan struct{}
	done chan struct{} // closed when run returned
}

// gcAck is one parked PubAck.
type gcAck struct {
	outq   *jsOutQ
	reply  string
	msg    []byte
	stream string
}

// gcTestBeforeSync, set by tests before a server starts, runs in every
// round before its sync; an error it returns fails the sync.
var gcTestBeforeSync func(stream string, acks int) error

func newGroupCommit(fs *fileStore, mdir string) *groupCommit {
	g := &groupCommit{fs: fs, name: fs.cfg.Name, mdir: mdir, dirty: map[uint32]gcBlock{},
		kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	g.cond = sync.NewCond(&g.mu)
	go g.run()
	return g
}

func (g *groupCommit) signal() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// gcBlock is a block a round syncs: a duplicate of the descriptor its
// write went through (fd; no path lookup, and the very file written
// even if the name now points elsewhere), or its name when none could
// be made (fd < 0).
type gcBlock struct {
	mfn string
	fd  int
}

// written notes that block index (file mfn, open as mfd) was written to.
// It is called with the block's lock held and takes only g.mu.
func (g *groupCommit) written(index uint32, mfn string, mfd *os.File) {
	g.mu.Lock()
	if _, ok := g.dirty[index]; !ok {
		g.dirty[index] = gcBlock{mfn: mfn, fd: dupFD(mfd)}
	}
	g.mu.Unlock()
	g.signal()
}

// created notes that a block file appeared: the next round syncs the
// directory too.
func (g *groupCommit) created() {
	g.mu.Lock()
	g.dirSync = true
	g.mu.Unlock()
}

// park holds a PubAck until a round has synced what it acknowledges. After
// a failed sync (or once stopped) it answers with the error at once.
func (g *groupCommit) park(outq *jsOutQ, reply string, msg []byte, stream string) {
	if outq == nil {
		return
	}
	g.mu.Lock()
	if err := g.err; err != nil {
		g.mu.Unlock()
		outq.sendMsg(reply, gcErrorResponse(stream, err))
		return
	}
	if g.stopped {
		g.mu.Unlock()
		outq.sendMsg(reply, gcErrorResponse(stream, ErrStoreClosed))
		return
	}
	g.acks = append(g.acks, gcAck{outq: outq, reply: reply, msg: msg, stream: stream})
	g.mu.Unlock()
	g.signal()
}

func gcErrorResponse(stream string, err error) []byte {
	resp := &JSPubAckResponse{PubAck: &PubAck{Stream: stream}, Error: NewJSStreamStoreFailedError(err, Unless(err))}
	b, _ := json.Marshal(resp)
	return b
}

func (g *groupCommit) run() {
	defer close(g.done)
	var spare []gcAck
	for {
		select {
		case <-g.kick:
		case <-g.quit:
			// stop set stopped first, so nothing is parked after this
			// last round: sync, then answer.
			g.round(spare)
			return
		}
		spare = g.round(spare)
	}
}

// round runs one round and returns the acks slice for reuse.
func (g *groupCommit) round(spare []gcAck) []gcAck {
	// The acks first, then the write of what the last block holds
	// unwritten, then the blocks written: every message an ack taken here
	// acknowledges was stored before it was parked, so it is in a block
	// written (and registered) by now, and the round syncs that block.
	g.mu.Lock()
	acks := g.acks
	g.acks = spare[:0]
	unlink := g.unlink
	g.unlink = nil
	round := g.taken.Add(1)
	g.inRound = true // from taking the acks on: a flush meanwhile waits for the next round too
	g.mu.Unlock()
	werr := g.fs.gcWriteLastBlock()
	g.mu.Lock()
	dirty, dirSync := g.dirty, g.dirSync
	if len(acks) == 0 && len(dirty) == 0 && !dirSync && werr == nil && g.err == nil {
		// Nothing stored before this round is left unsynced.
		g.synced.Store(round)
		g.inRound = false
		g.rounds++
		g.cond.Broadcast()
		g.mu.Unlock()
		removeFiles(unlink)
		return acks
	}
	g.dirSync = false
	g.dirty = make(map[uint32]gcBlock, len(dirty))
	g.syncing.Store(true)
	failed := g.err
	g.mu.Unlock()

	// A failed write of what was left to this round (by this round or by
	// another path, which dropped the block's unwritten records with it)
	// answers the round's acks with the error and syncs nothing. It is not
	// final as a failed sync is: nats' store refuses writes from then on
	// (a critical write error, which orderstore recovers from by starting
	// nats again once the disk has room), and the next start reads back
	// what the block file holds.
	if failed == nil && werr != nil {
		closeBlocks(dirty)
		g.syncing.Store(false)
		g.mu.Lock()
		g.unlink = append(g.unlink, unlink...) // for a round that syncs
		g.mu.Unlock()
		for i, a := range acks {
			a.outq.sendMsg(a.reply, gcErrorResponse(a.stream, werr))
			acks[i] = gcAck{}
		}
		g.endRound()
		return acks
	}

	if failed == nil && gcTestBeforeSync != nil {
		failed = gcTestBeforeSync(g.name, len(acks))
	}
	if failed == nil && g.fs.srv != nil {
		if p := g.fs.srv.gcFault.Load(); p != nil {
			failed = *p
		}
	}
	start := time.Now()
	if failed == nil {
		failed = g.sync(dirty, dirSync)
	} else {
		closeBlocks(dirty)
	}
	took := time.Since(start)
	g.syncing.Store(false)

	g.mu.Lock()
	first := failed != nil && g.err == nil
	if failed != nil && g.err == nil {
		g.err = failed
	}
	g.mu.Unlock()
	if first {
		g.fs.mu.Lock()
		g.fs.setWriteErr(failed)
		g.fs.mu.Unlock()
		if s := g.fs.srv; s != nil {
			s.Errorf("JetStream group commit: sync of stream '%s' failed, its store refuses writes from now on: %v", g.name, failed)
			if cb := s.getOpts().GroupCommitError; cb != nil {
				cb(g.name, failed)
			}
		}
	}
	if failed == nil {
		// What was stored before the round took its work is durable: the
		// removals made meanwhile may reach the disk now.
		g.synced.Store(round)
		removeFiles(unlink)
	}
	for i, a := range acks {
		if failed != nil {
			a.outq.sendMsg(a.reply, gcErrorResponse(a.stream, failed))
		} else {
			a.outq.sendMsg(a.reply, a.msg)
		}
		acks[i] = gcAck{}
	}

	g.endRound()
	if s := g.fs.srv; s != nil && failed == nil {
		if cb := s.getOpts().GroupCommitRound; cb != nil {
			cb(g.name, len(acks), took)
		}
	}
	return acks
}

// stamp is the count of rounds that took their work so far: a removal
// stamped d is covered once a round numbered above d has synced.
func (g *groupCommit) stamp() uint64 { return g.taken.Load() }

// covered reports whether a round that took its work after a removal
// stamped d has synced: whatever was stored before that removal (the
// record that replaced the removed one) is durable, so the removal may
// reach the disk (a block compacted without the record).
func (g *groupCommit) covered(d uint64) bool { return g.synced.Load() > d }

// removeAfterSync has the next round remove files once its sync succeeded.
func (g *groupCommit) removeAfterSync(files ...string) {
	g.mu.Lock()
	for _, f := range files {
		if f != _EMPTY_ {
			g.unlink = append(g.unlink, f)
		}
	}
	g.mu.Unlock()
	g.signal()
}

func removeFiles(files []string) {
	for _, f := range files {
		os.Remove(f) // one already gone (the stream deleted) is fine
	}
}

// gcRemoveMsgBlock (orderstore) removes an emptied block from the store as
// forceRemoveMsgBlock does, but leaves its files to the next round: the
// limits emptied it when a record was stored (the one that replaced its
// last record, in a bucket that keeps one per key), which may not be
// synced yet. Removed now, the removal could reach the disk first (any
// fsync of the file system commits it) and a power cut lose both records.
// Left, a cut before the round only brings the old record back, which the
// limits remove again at the next start.
// Both locks should be held.
func (fs *fileStore) gcRemoveMsgBlock(mb *msgBlock) error {
	mfn, kfn := mb.mfn, mb.kfn
	if err := mb.dirtyCloseWithRemove(false); err != nil {
		return err
	}
	mb.closed = true
	mb.fss = nil
	mb.mfn = _EMPTY_
	fs.removeMsgBlockFromList(mb)
	if next := mb.index + 1; next > fs.gc.removedBelow.Load() {
		fs.gc.removedBelow.Store(next) // fs.mu held: the only writer
	}
	fs.gc.removeAfterSync(mfn, kfn)
	return nil
}

// endRound marks the round done and wakes those waiting for it (flush).
func (g *groupCommit) endRound() {
	g.mu.Lock()
	g.inRound = false
	g.rounds++
	g.cond.Broadcast()
	g.mu.Unlock()
}

// gcWriteLastBlock writes what the last block holds in its cache only
// (with group commit, records are not written one by one: see
// fileStore.writeMsgRecord). Earlier blocks were written when the next
// one was started. It returns the block's write error, also when another
// path's write failed first (the next record's, a tombstone's): that write
// took the records left for this round with it (nats drops the block's
// cache on a failed write), so the acks of this round must not be sent as
// acknowledgements.
func (fs *fileStore) gcWriteLastBlock() error {
	fs.mu.RLock()
	lmb := fs.lmb
	fs.mu.RUnlock()
	if lmb == nil {
		return nil
	}
	if lmb.pendingWriteSize() > 0 {
		if err := lmb.flushPendingMsgs(); err != nil {
			return err
		}
	}
	lmb.mu.RLock()
	defer lmb.mu.RUnlock()
	return lmb.werr
}

// sync makes the given blocks (and the directory) durable, and closes the
// descriptors kept for them. A block known by name only whose file
// no longer exists was removed by a purge, compact or delete: there is
// nothing left of it to sync.
func (g *groupCommit) sync(dirty map[uint32]gcBlock, dirSync bool) (err error) {
	defer closeBlocks(dirty)
	if s := g.fs.srv; s != nil {
		s.gcSyncing.Store(g, time.Now()) // for GroupCommitSyncing
		defer s.gcSyncing.Delete(g)
	}
	dios := g.fs.dios
	for _, b := range dirty {
		dios.acquire()
		if b.fd >= 0 {
			err = fdatasync(b.fd, b.mfn)
		} else {
			err = syncByName(b.mfn)
		}
		dios.release()
		if err != nil {
			return err
		}
	}
	if dirSync && canFsyncDirectories {
		dios.acquire()
		err := syncDir(g.mdir)
		dios.release()
		if err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}

// closeBlocks closes the descriptors kept for dirty's blocks.
func closeBlocks(dirty map[uint32]gcBlock) {
	for _, b := range dirty {
		if b.fd >= 0 {
			closeFD(b.fd)
		}
	}
}

// syncByName syncs a block's file opened by name; one that no longer
// exists has nothing left to sync.
func syncByName(mfn string) error {
	f, err := os.OpenFile(mfn, os.O_RDONLY, 0)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	defer f.Close()
	return datasync(f)
}

// flush waits until a round that started after this call has finished: what
// was written and parked before it is synced and answered.
func (g *groupCommit) flush() error {
	g.mu.Lock()
	want := g.rounds + 1
	if g.inRound {
		want++
	}
	if g.stopped {
		err := g.err
		g.mu.Unlock()
		return err
	}
	g.mu.Unlock()
	g.signal()
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.rounds < want && !g.stopped {
		g.cond.Wait()
	}
	return g.err
}

// stop runs a last round (sync, then answer: a graceful stop drops no
// parked ack) and stops the committer. A publish parked after stop began
// is answered with ErrStoreClosed at once.
func (g *groupCommit) stop() {
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		return
	}
	g.stopped = true
	g.mu.Unlock()
	close(g.quit)
	<-g.done
	g.mu.Lock()
	g.cond.Broadcast()
	g.mu.Unlock()
}

// Err returns the failed sync that ended group commit, if any.
func (g *groupCommit) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// groupCommitMsgDir is the directory whose entries a round syncs.
func groupCommitMsgDir(storeDir string) string { return filepath.Join(storeDir, msgDir) }

// groupCommitFlush (orderstore) waits for a round that started after the
// call: what was written and parked before it is synced and answered.
// Without group commit it does nothing.
func (fs *fileStore) groupCommitFlush() error {
	if fs.gc == nil {
		return nil
	}
	return fs.gc.flush()
}

// sendPubAck (orderstore) sends a PubAck, or with group commit parks it
// until a sync covers what it acknowledges. Errors are never parked: they
// go out with outq.sendMsg at once.
// Lock should be held.
func (mset *stream) sendPubAck(outq *jsOutQ, reply string, response []byte, stream string) {
	if fs, ok := mset.store.(*fileStore); ok && fs.gc != nil {
		fs.gc.park(outq, reply, response, stream)
		return
	}
	outq.sendMsg(reply, response)
}

// sendDupAck (orderstore) is sendPubAck for a duplicate of the message
// at seq: with group commit, the round that answers it syncs the block
// holding seq too. An earlier run may have written that message and never
// synced it (its round's sync failed, a crash, nats restarted on the store
// after a failed write), and this run read it back from the page cache:
// the duplicate's ack vouches for it.
// Lock should be held.
func (mset *stream) sendDupAck(outq *jsOutQ, reply string, response []byte, stream string, seq uint64) {
	if fs, ok := mset.store.(*fileStore); ok && fs.gc != nil {
		fs.mu.RLock()
		mb := fs.selectMsgBlock(seq)
		fs.mu.RUnlock()
		if mb != nil {
			mb.mu.RLock()
			fs.gc.written(mb.index, mb.mfn, mb.mfd)
			mb.mu.RUnlock()
		}
	}
	mset.sendPubAck(outq, reply, response, stream)
}

// outqSent (orderstore) waits, at most max, until the stream's send loop
// has delivered everything queued on outq before the call: it queues a
// marker to an internal subscription of c (the stream's own client) and
// waits for it, since the loop delivers in order.
func (mset *stream) outqSent(c *client, outq *jsOutQ, max time.Duration) {
	if outq == nil || c == nil {
		return
	}
	subj := "_ORDERSTORE_GC_SENT." + nuid.Next()
	done := make(chan struct{})
	var once sync.Once
	sid := []byte(strconv.Itoa(int(mset.sid.Add(1))))
	_, err := c.processSub([]byte(subj), nil, sid, func(*subscription, *client, *Account, string, string, []byte) {
		once.Do(func() { close(done) })
	}, false)
	if err != nil {
		return
	}
	defer c.processUnsub(sid)
	outq.sendMsg(subj, nil)
	timer := time.NewTimer(max)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	}
}

// groupCommitFlushAll (orderstore) syncs and answers the parked acks of
// every group commit store, for Shutdown before it closes the clients.
func (s *Server) groupCommitFlushAll() {
	if !s.getOpts().GroupCommit {
		return
	}
	s.accounts.Range(func(_, v any) bool {
		acc, ok := v.(*Account)
		if !ok {
			return true
		}
		for _, mset := range acc.streams() {
			mset.mu.RLock()
			fs, ok := mset.store.(*fileStore)
			outq, c := mset.outq, mset.client
			mset.mu.RUnlock()
			if ok && fs.gc != nil {
				fs.gc.flush()
				mset.outqSent(c, outq, time.Second)
			}
		}
		return true
	})
}

// GroupCommitSyncing (orderstore) returns the stream whose group commit
// sync has been in flight the longest and when that sync began, or a zero
// time when no sync is in flight. A sync that does not return (a hung disk
// or NFS server) holds every PubAck parked behind it.
func (s *Server) GroupCommitSyncing() (stream string, since time.Time) {
	s.gcSyncing.Range(func(k, v any) bool {
		if t := v.(time.Time); since.IsZero() || t.Before(since) {
			stream, since = k.(*groupCommit).name, t
		}
		return true
	})
	return stream, since
}

// InjectGroupCommitFault (orderstore, for tests) makes every later group
// commit sync of this server fail with err, as a disk that reports a
// write-back error would.
func (s *Server) InjectGroupCommitFault(err error) { s.gcFault.Store(&err) }
