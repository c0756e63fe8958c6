package edgehub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// An edge's power cut, seen from its hub. With group commit an event is in
// the edge's stream (and can be sourced by the hub) a moment before the
// round that makes it durable; a power cut in that moment loses it at the
// edge, which then gives its sequence to the next event. The hub, resuming
// after the last sequence it holds, would keep the lost event as if it
// were acknowledged and never copy the acknowledged one that took its
// sequence.
//
// So every run of a node has an epoch (Config.EpochHeader, stamped on each event
// by the ingest service), and the stream records in its metadata where
// each epoch began (epochsKey: the first sequence it could write). The
// hub's watcher checks each epoch boundary of each edge once: every event
// it holds from that edge at or after the boundary must carry that epoch
// (or a later one). One that does not was lost at the edge: the watcher
// stops the edge's source, moves the lost events to the hub's dead-letter
// stream (never silently dropped, never kept as acknowledged), removes
// every copy from the first lost one on, and sources again from there, so
// the aggregate holds each event the edge acknowledged exactly once, in
// the edge's order. docs/topologies.md says why this design.

// epochsKey is the stream metadata key of the epochs' list:
// "<epoch>:<first seq>,..." oldest first.
const epochsKey = "orderstore_epochs"

// streamSourceHeader is what nats stamps on each event it sources: the
// source's stream, domain and sequence.
const streamSourceHeader = "Nats-Stream-Source"

// maxEpochs is how many epochs the list keeps.
const maxEpochs = 32

// maxRepair bounds the copies one repair moves or removes.
const maxRepair = 100000

type epochStart struct {
	epoch string
	first uint64
}

func parseEpochs(s string) []epochStart {
	var out []epochStart
	for _, f := range strings.Split(s, ",") {
		e, n, ok := strings.Cut(f, ":")
		if !ok {
			continue
		}
		seq, err := strconv.ParseUint(n, 10, 64)
		if err != nil || e == "" {
			continue
		}
		out = append(out, epochStart{e, seq})
	}
	return out
}

func formatEpochs(es []epochStart) string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s:%d", e.epoch, e.first)
	}
	return b.String()
}

// RecordEpoch writes this run's epoch and its first sequence to stream's
// metadata, before any event of this run is stored (the caller syncs the
// metadata). Not in a cluster: there each node's ingest service writes to
// the one stream, and no hub sources a cluster's stream by epoch.
func RecordEpoch(ctx context.Context, js jetstream.JetStream, stream, epoch string) error {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("epoch: %w", err)
	}
	info := st.CachedInfo()
	cfg := info.Config
	es := parseEpochs(cfg.Metadata[epochsKey])
	es = append(es, epochStart{epoch, info.State.LastSeq + 1})
	if len(es) > maxEpochs {
		es = es[len(es)-maxEpochs:]
	}
	md := map[string]string{}
	for k, v := range cfg.Metadata {
		md[k] = v
	}
	md[epochsKey] = formatEpochs(es)
	cfg.Metadata = md
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("epoch: record it in stream %q: %w", stream, err)
	}
	return nil
}

// expectedEpoch is the epoch that wrote sequence seq: the last to begin
// at or before it ("" before the list's first).
func expectedEpoch(es []epochStart, seq uint64) string {
	e := ""
	for _, x := range es {
		if x.first <= seq {
			e = x.epoch
		}
	}
	return e
}

// checkEpochs checks edge's epoch boundaries the watcher has not yet
// checked, and repairs the aggregate where the edge lost events.
func (w *Watcher) checkEpochs(ctx context.Context, edge string, epochs []epochStart, sourced uint64) {
	if len(epochs) < 2 {
		return
	}
	w.mu.Lock()
	checked := w.checked[edge]
	if checked == nil {
		checked = map[string]bool{}
		w.checked[edge] = checked
	}
	w.mu.Unlock()
	for _, ep := range epochs[1:] {
		w.mu.Lock()
		done := checked[ep.epoch]
		w.mu.Unlock()
		if done {
			continue
		}
		if sourced < ep.first {
			// The aggregate holds nothing at or past the boundary: what
			// the edge lost there was never copied, and what it holds
			// there now is this epoch's (the run before it is over).
			w.mu.Lock()
			checked[ep.epoch] = true
			w.mu.Unlock()
			continue
		}
		if err := w.repair(ctx, edge, epochs, ep); err != nil {
			w.log.Warn("hub: check an edge's epoch", "edge", edge, "epoch", ep.epoch, "first_seq", ep.first, "err", err)
			return // again on the next round
		}
		w.mu.Lock()
		checked[ep.epoch] = true
		w.mu.Unlock()
	}
}

// hubCopy is one event of the aggregate from an edge.
type hubCopy struct {
	seq, sseq uint64 // the aggregate's sequence, the edge's
	msg       *jetstream.RawStreamMsg
}

// firstCopyFrom is the aggregate's first event from edge whose edge
// sequence is at least from (a binary search: the copies of one edge are
// in the edge's order).
func (w *Watcher) firstCopyFrom(ctx context.Context, st jetstream.Stream, edge string, from uint64) (*hubCopy, error) {
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	next := func(seq uint64) (*hubCopy, error) {
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(edge+".>"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return &hubCopy{seq: m.Sequence, sseq: sourceSeq(m.Header.Get(streamSourceHeader)), msg: m}, nil
	}
	// The smallest h whose next copy is from at least from (or none).
	lo, hi := max(info.State.FirstSeq, 1), info.State.LastSeq+1
	for lo < hi {
		mid := lo + (hi-lo)/2
		c, err := next(mid)
		if err != nil {
			return nil, err
		}
		if c == nil || c.sseq >= from {
			hi = mid
		} else {
			lo = c.seq + 1
		}
	}
	if lo > info.State.LastSeq {
		return nil, nil
	}
	return next(lo)
}

// repair checks the aggregate's copies from edge at and after boundary ep
// against the epochs, and, where copies are of an earlier epoch (lost at
// the edge), moves them to the dead-letter stream, removes every copy
// from the first lost one on, and sources the edge again from there.
func (w *Watcher) repair(ctx context.Context, edge string, epochs []epochStart, ep epochStart) error {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	agg := *w.cfg.Spec.Aggregate
	st, err := w.js.Stream(rctx, agg.Name)
	if err != nil {
		return err
	}
	first, err := w.firstCopyFrom(rctx, st, edge, ep.first)
	if err != nil || first == nil {
		return err
	}
	// Collect the copies from the boundary on, up to the first that is of
	// the expected epoch: the lost ones.
	var lost []hubCopy
	c := first
	for c != nil && len(lost) < maxRepair {
		got, want := c.msg.Header.Get(w.cfg.EpochHeader), expectedEpoch(epochs, c.sseq)
		if got == want || got == "" && want == "" {
			break
		}
		lost = append(lost, *c)
		m, err := st.GetMsg(rctx, c.seq+1, jetstream.WithGetMsgSubject(edge+".>"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		} else if err != nil {
			return err
		}
		c = &hubCopy{seq: m.Sequence, sseq: sourceSeq(m.Header.Get(streamSourceHeader)), msg: m}
	}
	if len(lost) == 0 {
		return nil
	}
	// Stop sourcing from edge while the copies are moved.
	without := agg
	without.Sources = slices.DeleteFunc(slices.Clone(agg.Sources), func(ss *jetstream.StreamSource) bool { return ss.Domain == edge })
	if _, err := w.js.UpdateStream(rctx, without); err != nil {
		return fmt.Errorf("stop sourcing: %w", err)
	}
	defer func() {
		if _, err := w.js.UpdateStream(context.Background(), agg); err != nil {
			w.log.Error("hub: source the edge again after a repair (the watcher retries)", "edge", edge, "err", err)
		}
	}()
	// Every copy from the first lost one on: the lost ones to the
	// dead-letter stream, all of them out of the aggregate.
	var orders []string
	dlq := w.cfg.DeadLetterPrefix
	removed, moved := 0, 0
	var firstLost, lastLost uint64
	runs := map[string]bool{} // the epochs that lost copies: one per crash
	for seq := lost[0].seq; removed < maxRepair; {
		m, err := st.GetMsg(rctx, seq, jetstream.WithGetMsgSubject(edge+".>"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		} else if err != nil {
			return err
		}
		sseq := sourceSeq(m.Header.Get(streamSourceHeader))
		if m.Header.Get(w.cfg.EpochHeader) != expectedEpoch(epochs, sseq) {
			h := nats.Header{}
			for k, v := range m.Header {
				if !strings.HasPrefix(k, "Nats-") { // nats refuses its own (Nats-Stream-Source) on a publish
					h[k] = v
				}
			}
			if id := m.Header.Get(nats.MsgIdHdr); id != "" {
				h.Set("Orderstore-Original-Msg-Id", id)
			}
			h.Set("Orderstore-Original-Source", m.Header.Get(streamSourceHeader))
			h.Set("Orderstore-Original-Stream", agg.Name)
			h.Set("Orderstore-Original-Subject", m.Subject)
			h.Set("Orderstore-Original-Sequence", strconv.FormatUint(m.Sequence, 10))
			h.Set("Orderstore-Error", fmt.Sprintf("lost at edge %s: its sequence %d was given to another event after a crash (epoch %s began at %d); it was never acknowledged there", edge, sseq, ep.epoch, ep.first))
			h.Set("Orderstore-Dead-Lettered-At", time.Now().UTC().Format(time.RFC3339Nano))
			if _, err := w.js.PublishMsg(rctx, &nats.Msg{Subject: dlq + "." + m.Subject, Header: h, Data: m.Data}); err != nil {
				return fmt.Errorf("move a lost event to the dead-letter stream: %w", err)
			}
			var ev struct {
				OrderID string `json:"order_id"`
			}
			if json.Unmarshal(m.Data, &ev) == nil && ev.OrderID != "" && len(orders) < 20 {
				orders = append(orders, ev.OrderID)
			}
			moved++
			runs[m.Header.Get(w.cfg.EpochHeader)] = true
			if firstLost == 0 {
				firstLost = sseq
			}
			lastLost = sseq
		}
		if err := st.DeleteMsg(rctx, m.Sequence); err != nil {
			return fmt.Errorf("remove a copy: %w", err)
		}
		removed++
		seq = m.Sequence + 1
	}
	// Every copy moved counts, of every crash this repair covers (a later
	// boundary then finds nothing left).
	n := uint64(moved)
	w.mu.Lock()
	s := w.st[edge]
	s.LostEvents += n
	s.Regressions += uint64(max(len(runs), 1))
	s.LastRegression = fmt.Sprintf("%s: %d events copied from %s (its sequences %d-%d) were lost there in %d crash(es); moved to %s, %d copies sourced again",
		time.Now().UTC().Format(time.RFC3339), n, edge, firstLost, lastLost, max(len(runs), 1), w.cfg.DeadLetterStream, removed)
	w.mu.Unlock()
	w.log.Error("hub: an edge lost events the hub had copied (a crash before they were durable there): they were never acknowledged; moved to the dead-letter stream",
		"edge", edge, "lost", n, "edge_seqs", fmt.Sprintf("%d-%d", firstLost, lastLost), "removed_copies", removed,
		"orders", strings.Join(orders, ","), "hint", "the hub's projection of these orders still reflects the lost events until it is rebuilt")
	return nil
}
