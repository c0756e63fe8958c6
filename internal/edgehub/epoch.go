package edgehub

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/internal/ingest"
)

// An edge's power cut, seen from its hub: docs/topologies.md ("An edge's
// power cut") says what goes wrong, and how the epochs find and repair it.

// epochsKey is the stream metadata key of the epochs' list: "<epoch>:<first seq>,..." oldest first.
const epochsKey = "orderstore_epochs"

// HeaderOriginalSource marks a dead letter that is a copy an edge lost (never acknowledged there):
// the source it came from.
const HeaderOriginalSource = "Orderstore-Original-Source"

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
		e, n, _ := strings.Cut(f, ":")
		if seq, err := strconv.ParseUint(n, 10, 64); err == nil && e != "" {
			out = append(out, epochStart{e, seq})
		}
	}
	return out
}

// RecordEpoch writes this run's epoch and its first sequence to stream's metadata (the caller syncs
// it). Not in a cluster: there each node's admission stamps its own epoch on the one stream, and
// no hub sources a cluster's stream by epoch.
func RecordEpoch(ctx context.Context, js jetstream.JetStream, stream, epoch string) error {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("epoch: %w", err)
	}
	info := st.CachedInfo()
	cfg := info.Config
	// A producer's events stored while start-up ran carry this epoch
	// already: the run begins at the first of them.
	first := info.State.LastSeq + 1
	m, err := firstMsg(ctx, st, ">", func(m *jetstream.RawStreamMsg) bool { return m.Header.Get(ingest.EpochHeader) == epoch })
	if err != nil {
		return fmt.Errorf("epoch: find this run's first event in stream %q: %w", stream, err)
	} else if m != nil {
		first = m.Sequence
	}
	es := append(parseEpochs(cfg.Metadata[epochsKey]), epochStart{epoch, first})
	es = es[max(len(es)-maxEpochs, 0):]
	fs := make([]string, len(es))
	for i, e := range es {
		fs[i] = fmt.Sprintf("%s:%d", e.epoch, e.first)
	}
	cfg.Metadata = maps.Collect(maps.All(cfg.Metadata)) // a copy (of the cached info's), never nil
	cfg.Metadata[epochsKey] = strings.Join(fs, ",")
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
	for _, ep := range epochs[min(1, len(epochs)):] { // the first one has no run before it
		if w.checked[[2]string{edge, ep.epoch}] {
			continue
		}
		// With sourced < ep.first the aggregate holds nothing at or past the boundary: what the
		// edge lost there was never copied, and what it holds there now is this epoch's (the run
		// before it is over).
		if sourced >= ep.first {
			if err := w.repair(ctx, edge, epochs, ep); err != nil {
				w.log.Warn("hub: check an edge's epoch", "edge", edge, "epoch", ep.epoch, "first_seq", ep.first, "err", err)
				return // again on the next round
			}
		}
		w.checked[[2]string{edge, ep.epoch}] = true
	}
}

// nextMsg is st's first message on subject at or after seq (nil: none).
func nextMsg(ctx context.Context, st jetstream.Stream, subject string, seq uint64) (*jetstream.RawStreamMsg, error) {
	m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	return m, err
}

// firstMsg is st's first message on subject for which from holds, where
// from holds for every message after it too (a binary search); nil: none.
func firstMsg(ctx context.Context, st jetstream.Stream, subject string, from func(*jetstream.RawStreamMsg) bool) (*jetstream.RawStreamMsg, error) {
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	lo, hi := max(info.State.FirstSeq, 1), info.State.LastSeq+1
	for lo < hi {
		mid := lo + (hi-lo)/2
		m, err := nextMsg(ctx, st, subject, mid)
		if err != nil {
			return nil, err
		}
		if m == nil || from(m) {
			hi = mid
		} else {
			lo = m.Sequence + 1
		}
	}
	if lo > info.State.LastSeq {
		return nil, nil
	}
	return nextMsg(ctx, st, subject, lo)
}

// repair checks the aggregate's copies from edge at and after boundary ep against the epochs, and,
// where copies are of an earlier epoch (lost at the edge), moves them to the dead-letter stream,
// removes every copy from the first lost one on, and sources the edge again from there.
func (w *Watcher) repair(ctx context.Context, edge string, epochs []epochStart, ep epochStart) error {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	agg := *w.cfg.Spec.Aggregate
	st, err := w.js.Stream(rctx, agg.Name)
	if err != nil {
		return err
	}
	// The copies of one edge are in the edge's order.
	first, err := firstMsg(rctx, st, edge+".>", func(m *jetstream.RawStreamMsg) bool { return sourceSeq(m) >= ep.first })
	if err != nil || first == nil {
		return err
	}
	// The first copy from the boundary on is of the expected epoch: the
	// edge lost none of its copied events there.
	if first.Header.Get(w.cfg.EpochHeader) == expectedEpoch(epochs, sourceSeq(first)) {
		return nil
	}
	// Stop sourcing from edge while the copies are moved.
	if _, err := w.js.UpdateStream(rctx, withoutSource(agg, edge)); err != nil {
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
	removed, moved := 0, 0
	var firstLost, lastLost uint64
	runs := map[string]bool{} // the epochs that lost copies: one per crash
	for m := first; m != nil && removed < maxRepair; {
		sseq := sourceSeq(m)
		if m.Header.Get(w.cfg.EpochHeader) != expectedEpoch(epochs, sseq) {
			h := nats.Header{}
			maps.Copy(h, m.Header)
			// nats refuses its own (Nats-Stream-Source) on a publish
			maps.DeleteFunc(h, func(k string, _ []string) bool { return strings.HasPrefix(k, "Nats-") })
			if id := m.Header.Get(nats.MsgIdHdr); id != "" {
				h.Set("Orderstore-Original-Msg-Id", id)
			}
			h.Set(HeaderOriginalSource, m.Header.Get(ingest.StreamSourceHeader))
			h.Set("Orderstore-Original-Stream", agg.Name)
			h.Set("Orderstore-Original-Subject", m.Subject)
			h.Set("Orderstore-Original-Sequence", strconv.FormatUint(m.Sequence, 10))
			h.Set("Orderstore-Error", fmt.Sprintf("lost at edge %s: its sequence %d was given to another event after a crash (epoch %s began at %d); it was never acknowledged there", edge, sseq, ep.epoch, ep.first))
			h.Set("Orderstore-Dead-Lettered-At", time.Now().UTC().Format(time.RFC3339Nano))
			if _, err := w.js.PublishMsg(rctx, &nats.Msg{Subject: w.cfg.DeadLetterPrefix + "." + m.Subject, Header: h, Data: m.Data}); err != nil {
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
			firstLost, lastLost = cmp.Or(firstLost, sseq), sseq
		}
		if err := st.DeleteMsg(rctx, m.Sequence); err != nil {
			return fmt.Errorf("remove a copy: %w", err)
		}
		removed++
		if m, err = nextMsg(rctx, st, edge+".>", m.Sequence+1); err != nil {
			return err
		}
	}
	// Every copy moved counts, of every crash covered (a later boundary finds none left).
	w.mu.Lock()
	s := w.st[edge]
	s.LostEvents += uint64(moved)
	s.Regressions += uint64(max(len(runs), 1))
	s.LastRegression = fmt.Sprintf("%s: %d events copied from %s (its sequences %d-%d) were lost there in %d crash(es); moved to %s, %d copies sourced again",
		time.Now().UTC().Format(time.RFC3339), moved, edge, firstLost, lastLost, max(len(runs), 1), w.cfg.DeadLetterStream, removed)
	w.mu.Unlock()
	w.log.Error("hub: an edge lost events the hub had copied (a crash before they were durable there): they were never acknowledged; moved to the dead-letter stream",
		"edge", edge, "lost", moved, "edge_seqs", fmt.Sprintf("%d-%d", firstLost, lastLost), "removed_copies", removed,
		"orders", strings.Join(orders, ","), "hint", "the hub's projection of these orders still reflects the lost events until it is rebuilt")
	return nil
}
