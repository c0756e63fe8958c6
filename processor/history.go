package processor

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/internal/leaderget"
)

// An order's history index (docs/processor.md, "An order's history"): the stream sequences of the
// events the projection applied to it, in stream order. The newest are the record's "history" tail;
// every HistoryChunk of them at or below the ack floor (no earlier event of the order can still
// arrive) are sealed into the history bucket as "<order id>.<chunk number>".

// HistoryChunk is how many sequences one sealed chunk of an order's history index holds.
const HistoryChunk = 256

// MaxHistoryPage bounds the events of one history page.
const MaxHistoryPage = 1000

// maxHistoryPageBytes bounds the payload and header bytes of one page:
// a page stops early (Next says where to go on) rather than exceed it.
const maxHistoryPageBytes = 4 << 20

// historyGetParallel bounds the event reads of a page in flight at once.
const historyGetParallel = 16

// ErrNoHistory says the projection keeps no history index ([Projection.SetHistory] was not called).
var ErrNoHistory = errors.New("the projection keeps no history index")

// ErrNotRetained is returned (wrapped) by [Projection.AsOf] for a point
// before the first event of the order that the stream still holds.
var ErrNotRetained = errors.New("the stream no longer holds the order's events up to that point")

// SetHistory makes the projection keep each order's history index, with its sealed chunks in kv
// (the appliance's "<projection bucket>_HISTORY"). Call it before the first batch. Records written
// before the index existed count their earlier events as unindexed ([HistoryPage.Unindexed]).
func (p *Projection) SetHistory(kv jetstream.KeyValue) {
	p.hist = kv
	p.histPrefix = "$KV." + kv.Bucket() + "."
}

// historyCount is how many of r's events the index lists.
func (r *record) historyCount() int { return r.HistoryChunks*HistoryChunk + len(r.History) }

// unindexed is how many of r's events its index does not list: those applied before the index began
// (a record not written since counts them all).
func (r *record) unindexed() int { return max(r.Events-r.historyCount(), 0) }

// indexHistory adds seq to r's history tail (sorted: a retried event can arrive after later ones).
func (r *record) indexHistory(seq uint64) {
	r.HistoryUnordered = r.HistoryUnordered || seq < r.HistorySealedMax
	i, found := slices.BinarySearch(r.History, seq)
	if !found {
		r.History = slices.Insert(r.History, i, seq)
	}
}

// maxHistoryTail bounds an order's unsealed tail: past it the oldest are sealed even above the ack
// floor, so that a hot order's record stays far below max_payload however far the floor lags.
const maxHistoryTail = 4 * HistoryChunk

// sealable returns the chunks of r's tail ready to be sealed: every HistoryChunk sequences at or
// below the applied floor, oldest first (no earlier event of the order can still arrive), and past
// maxHistoryTail the oldest regardless (an event retried after that, rare, is listed after the
// sealed chunks, out of stream order).
func (r *record) sealable() [][]uint64 {
	n, _ := slices.BinarySearch(r.History, r.AppliedFloor+1)
	n = max(n, len(r.History)-maxHistoryTail)
	var out [][]uint64
	for i := 0; i+HistoryChunk <= n; i += HistoryChunk {
		out = append(out, r.History[i:i+HistoryChunk])
	}
	return out
}

// historyKey is the history bucket's key of chunk n of an order. The chunk number, a last token
// without dots, keeps orders' keys apart ("a.1" chunk 0 is "a.1.0"; "a" chunk 1 is "a.1").
func historyKey(orderID string, n int) string { return orderID + "." + strconv.Itoa(n) }

// sealWrites returns the writes of the chunks next seals, and seals them in next (its tail shrinks,
// its chunk count grows). A chunk holds sequences of base, the tail as read, never the events this
// write applies: a chunk write has no compare-and-set, and the record that wins its own may name a
// chunk another processor wrote from the same record (in a cluster), so both must write the same
// chunk. An applied event below a sealed one stays in the tail (the index is then unordered).
func (p *Projection) sealWrites(id string, next *record, base []uint64) []*nats.Msg {
	if p.hist == nil {
		return nil
	}
	var msgs []*nats.Msg
	n := min(len(next.sealable()), len(base)/HistoryChunk)
	sealed := base[:n*HistoryChunk]
	for c := range slices.Chunk(sealed, HistoryChunk) {
		data, _ := json.Marshal(c) // a []uint64 always marshals
		msgs = append(msgs, &nats.Msg{Subject: p.histPrefix + historyKey(id, next.HistoryChunks), Data: data})
		next.HistoryChunks++
		next.HistorySealedMax = max(next.HistorySealedMax, c[len(c)-1])
	}
	if n > 0 {
		next.History = slices.DeleteFunc(slices.Clone(next.History), func(s uint64) bool {
			_, ok := slices.BinarySearch(sealed, s)
			return ok
		})
		if len(next.History) == 0 {
			next.History = nil
		}
		next.HistoryUnordered = next.HistoryUnordered || len(next.History) > 0 && next.History[0] < next.HistorySealedMax
	}
	return msgs
}

// HistoryEvent is one event of an order's history.
type HistoryEvent struct {
	// Position is the event's place in the order's indexed history, from 0.
	Position int
	Sequence uint64
	// Retained is false when retention removed the event from the stream: only Sequence is known.
	Retained bool
	// Replaced is true when the stream holds, at Sequence, an event of
	// another order: the applied event was lost (a power cut before it
	// was durable, with a relaxed sync_interval) and its sequence reused.
	Replaced bool
	// Edge is, on a hub, the edge the event came from (the first token of
	// its subject in the aggregate stream; "hub" for the hub's own).
	Edge    string
	Subject string
	Type    string
	Status  string
	Time    time.Time
	Header  nats.Header
	Data    []byte
	// State is the order's state after the event, from [Projection.HistoryStates]; nil otherwise.
	State *Order
}

// HistoryPage is a page of an order's history.
type HistoryPage struct {
	OrderID string
	// Total is how many events the index lists; Unindexed how many earlier events the order had
	// when the index began (an upgrade from a version without one): those are not listed.
	Total, Unindexed int
	// Events are the page's, oldest first, from position From.
	From   int
	Events []HistoryEvent
	// Next is the position to read on from; 0 at the end.
	Next int
}

// History returns up to limit (at most MaxHistoryPage) of an order's events from position from (0
// is its first indexed event), read from stream s, the stream the projection folds. An unknown
// order is jetstream.ErrKeyNotFound.
func (p *Projection) History(ctx context.Context, s jetstream.Stream, orderID string, from, limit int) (HistoryPage, error) {
	return p.history(ctx, s, orderID, from, limit, false)
}

// HistoryStates is [Projection.History] with, for each listed event, the order's state after it
// (State; nil before any event was folded): the fold of the order's events up to it, by the live
// projection's fold. It folds every event before the page too, so its cost grows with from.
func (p *Projection) HistoryStates(ctx context.Context, s jetstream.Stream, orderID string, from, limit int) (HistoryPage, error) {
	return p.history(ctx, s, orderID, from, limit, true)
}

// history is History, and HistoryStates with states: one read of the
// order's record serves the page and the fold before it.
func (p *Projection) history(ctx context.Context, s jetstream.Stream, orderID string, from, limit int, states bool) (HistoryPage, error) {
	if p.hist == nil {
		return HistoryPage{}, ErrNoHistory
	}
	if from < 0 {
		return HistoryPage{}, fmt.Errorf("history of %q: position %d is negative", orderID, from)
	}
	limit = min(max(limit, 1), MaxHistoryPage)
	r, err := p.readRecord(ctx, orderID)
	if err != nil {
		return HistoryPage{}, err
	}
	page := HistoryPage{OrderID: orderID, Total: r.historyCount(), Unindexed: r.unindexed(), From: from}
	seqs, err := p.historySeqs(ctx, orderID, r, from, limit)
	if err != nil {
		return page, err
	}
	size := 0
	if err := p.historyEvents(ctx, s, orderID, from, seqs, func(ev HistoryEvent) bool {
		if size += len(ev.Data) + headerSize(ev.Header); size > maxHistoryPageBytes && len(page.Events) > 0 {
			return false // the page stops early rather than pass the bound
		}
		page.Events = append(page.Events, ev)
		return true
	}); err != nil {
		return page, err
	}
	if next := from + len(page.Events); next < page.Total {
		page.Next = next
	}
	if !states || len(page.Events) == 0 {
		return page, nil
	}
	_, folded, err := p.foldUpTo(ctx, s, orderID, r, AsOfPoint{}, min(from, r.historyCount()), nil)
	if err != nil {
		return page, err
	}
	for i := range page.Events {
		he := &page.Events[i]
		if he.Retained && !he.Replaced {
			folded.apply(he.event(orderID))
		}
		if folded.Events > 0 {
			o := folded.Order
			o.UpdatedAt = o.LastEventAt
			he.State = &o
		}
	}
	return page, nil
}

// readRecord reads an order's record; a record of withheld events only is not an order, and one
// whose history index claims more than it holds (written by hand) is refused.
func (p *Projection) readRecord(ctx context.Context, orderID string) (record, error) {
	switch r, _, err := p.load(ctx, orderID); {
	case err != nil:
		return record{}, err
	case r.Events == 0:
		// None, or only withheld events: no order yet.
		return record{}, jetstream.ErrKeyNotFound
	case r.HistoryChunks < 0 || r.HistoryChunks > r.Events/HistoryChunk || r.historyCount() > r.Events:
		return record{}, fmt.Errorf("projection %q: the record's history index lists %d events of its %d (written by hand?)", orderID, r.historyCount(), r.Events)
	default:
		return r, nil
	}
}

// historySeqs returns the sequences at positions [from, from+limit) of r's index.
func (p *Projection) historySeqs(ctx context.Context, orderID string, r record, from, limit int) ([]uint64, error) {
	var out []uint64
	sealed := r.HistoryChunks * HistoryChunk
	end := min(from+limit, r.historyCount())
	for pos := from; pos < end; {
		if pos >= sealed {
			return append(out, r.History[pos-sealed:end-sealed]...), nil
		}
		n := pos / HistoryChunk
		chunk, err := p.readChunk(ctx, orderID, n)
		if err != nil {
			return out, err
		}
		upTo := min(end, (n+1)*HistoryChunk)
		out = append(out, chunk[pos-n*HistoryChunk:upTo-n*HistoryChunk]...)
		pos = upTo
	}
	return out, nil
}

// readChunk reads chunk n of an order's index. A chunk that is gone (the history bucket's limits,
// history_max_bytes or max_age, dropped it; or a power cut before it was durable) lists
// HistoryChunk unknown sequences (0): events no longer retained.
func (p *Projection) readChunk(ctx context.Context, orderID string, n int) ([]uint64, error) {
	key := historyKey(orderID, n)
	var data []byte
	e, err := p.hist.Get(ctx, key)
	if err == nil {
		data = e.Value()
	} else if errors.Is(err, jetstream.ErrKeyNotFound) {
		// A replica may lag the one that served the record: ask the leader before calling it gone.
		d, seq, deleted, lerr := leaderget.LastBySubject(ctx, p.js, "KV_"+p.hist.Bucket(), p.histPrefix+key)
		if lerr == nil && (seq == 0 || deleted) {
			return make([]uint64, HistoryChunk), nil
		}
		data, err = d, lerr
	}
	if err != nil {
		return nil, fmt.Errorf("history of %q: chunk %d of its index: %w", orderID, n, err)
	}
	var chunk []uint64
	if err := json.Unmarshal(data, &chunk); err != nil || len(chunk) != HistoryChunk {
		return nil, fmt.Errorf("history of %q: chunk %d of its index is damaged (%d sequences, %v)", orderID, n, len(chunk), err)
	}
	return chunk, nil
}

// historyEvents hands yield the events at seqs (positions from on) in order
// until it returns false, read from s historyGetParallel at a time: one window held.
func (p *Projection) historyEvents(ctx context.Context, s jetstream.Stream, orderID string, from int, seqs []uint64, yield func(HistoryEvent) bool) error {
	for w := range slices.Chunk(seqs, historyGetParallel) {
		out := make([]HistoryEvent, len(w))
		errs := make([]error, len(w))
		parallel(len(w), len(w), func(i int) {
			out[i] = HistoryEvent{Position: from + i, Sequence: w[i]}
			if w[i] == 0 {
				return // its index chunk is gone: not retained
			}
			m, err := s.GetMsg(ctx, w[i])
			if err != nil {
				if !errors.Is(err, jetstream.ErrMsgNotFound) {
					errs[i] = fmt.Errorf("history of %q: event %d: %w", orderID, w[i], err)
				}
				return // not found: not retained
			}
			ev := &out[i]
			ev.Retained = true
			ev.Subject, ev.Type, ev.Time, ev.Header, ev.Data = m.Subject, eventType(m.Subject), m.Time.UTC(), eventHeader(m.Header), m.Data
			id, status, perr := parse(m.Subject, m.Data)
			if perr != nil || id != orderID {
				ev.Replaced = true
				return
			}
			ev.Status = status
		})
		if err := errors.Join(errs...); err != nil {
			return err
		}
		for _, ev := range out {
			if !yield(ev) {
				return nil
			}
		}
		from += len(w)
	}
	return nil
}

// directGetHeaders are the headers a direct get adds to a message (its place, not the producer's).
var directGetHeaders = []string{"Nats-Stream", "Nats-Sequence", "Nats-Time-Stamp", "Nats-Subject", "Nats-Last-Sequence", "Nats-Num-Pending", "Nats-UpTo-Sequence"}

// eventHeader is h without directGetHeaders; nil when nothing is left.
func eventHeader(h nats.Header) nats.Header {
	for _, k := range directGetHeaders {
		h.Del(k)
	}
	if len(h) == 0 {
		return nil
	}
	return h
}

// AsOfPoint is a point in an order's history: its events up to stream sequence Seq (0: no bound)
// and stored at or before Time (zero: no bound).
type AsOfPoint struct {
	Seq  uint64
	Time time.Time
}

func (a AsOfPoint) includes(seq uint64, t time.Time) bool {
	return (a.Seq == 0 || seq <= a.Seq) && (a.Time.IsZero() || !t.After(a.Time))
}

// AsOfState is an order's state as of a point.
type AsOfState struct {
	// Order is the fold of the order's events up to the point, by the
	// projection's own fold (UpdatedAt is the last folded event's time).
	Order Order
	// Folded counts the events folded. NotRetained counts the events up to the point that the
	// stream no longer holds (replaced ones too), and Unindexed those older than the history index:
	// neither is in Order. Complete is true when both are 0.
	Folded, NotRetained, Unindexed int
	Complete                       bool
	// Last is the sequence of the last folded event.
	Last uint64
}

// AsOf folds an order's events up to point, read through its history index from stream s, with the
// same fold as the live projection: at a point past its last event it equals [Projection.Get] (but
// UpdatedAt). An order with no event up to the point is jetstream.ErrKeyNotFound; a point before
// the first event the stream still holds is ErrNotRetained.
func (p *Projection) AsOf(ctx context.Context, s jetstream.Stream, orderID string, point AsOfPoint) (AsOfState, error) {
	return p.FoldEvents(ctx, s, orderID, point, nil)
}

// FoldEvents calls fn (if set) with each event of the order up to point, in stream order (in index
// order for an index that is out of order, see record.HistoryUnordered: rare, after a retry of a
// very hot order): the events AsOf folds, which it returns folded by the projection's own fold too.
// With it a program folds an order's history with its own code (a [Handler] of its own, say), and
// gets the same answers about retention. An error from fn stops it and is returned.
func (p *Projection) FoldEvents(ctx context.Context, s jetstream.Stream, orderID string, point AsOfPoint, fn func(Event) error) (AsOfState, error) {
	if p.hist == nil {
		return AsOfState{}, ErrNoHistory
	}
	r, err := p.readRecord(ctx, orderID)
	if err != nil {
		return AsOfState{}, err
	}
	switch st, _, err := p.foldUpTo(ctx, s, orderID, r, point, r.historyCount(), fn); {
	case err != nil || st.Folded > 0:
		return st, err
	case st.NotRetained > 0 || st.Unindexed > 0:
		return st, fmt.Errorf("order %q: %w (%d events not retained, %d older than the history index)", orderID, ErrNotRetained, st.NotRetained, st.Unindexed)
	default:
		return st, jetstream.ErrKeyNotFound
	}
}

// foldUpTo folds the events of r's index at positions below end that lie
// within point, and returns the state and the fold's record.
func (p *Projection) foldUpTo(ctx context.Context, s jetstream.Stream, orderID string, r record, point AsOfPoint, end int, fn func(Event) error) (AsOfState, record, error) {
	var folded record
	st := AsOfState{Unindexed: r.unindexed()}
	pending := 0 // events not retained, before the next retained one
	done := false
	for from := 0; from < end && !done; from += HistoryChunk {
		if err := ctx.Err(); err != nil {
			return st, folded, err
		}
		seqs, err := p.historySeqs(ctx, orderID, r, from, min(HistoryChunk, end-from))
		if err != nil {
			return st, folded, err
		}
		var fnErr error
		err = p.historyEvents(ctx, s, orderID, from, seqs, func(he HistoryEvent) bool {
			if he.Replaced { // lost: the stream no longer holds it, as one not retained
				he.Retained, he.Time = false, time.Time{}
			}
			// An event not retained has no time: only its sequence (0 if
			// its chunk is gone) can place it past the point.
			if !point.includes(he.Sequence, he.Time) {
				// Past the point: the rest is too, unless the index is out of order.
				done = !r.HistoryUnordered
				return !done
			}
			if !he.Retained {
				pending++
				return true
			}
			st.NotRetained += pending
			pending = 0
			ev := he.event(orderID)
			if fn != nil {
				if fnErr = fn(ev); fnErr != nil {
					return false
				}
			}
			folded.apply(ev)
			st.Folded++
			st.Last = he.Sequence
			return true
		})
		if err = cmp.Or(err, fnErr); err != nil {
			return st, folded, err
		}
	}
	// Events not retained before the first event past the point (or the end) are counted within it:
	// with a time point their times are unknown, and an answer that may miss them says so.
	st.NotRetained += pending
	st.Order = folded.Order
	st.Order.UpdatedAt = folded.LastEventAt
	st.Complete = st.NotRetained == 0 && st.Unindexed == 0
	return st, folded, nil
}

func (he *HistoryEvent) event(orderID string) Event {
	return Event{Subject: he.Subject, Type: he.Type, OrderID: orderID, Status: he.Status, Data: he.Data, Header: he.Header, Sequence: he.Sequence, Time: he.Time}
}

// writeSeals writes the sealed chunks of writes, all in flight at once, and returns the writes
// whose chunks are stored; the others fail their order's events in results.
func (p *Projection) writeSeals(ctx context.Context, writes []write, results [][]error) []write {
	futs := make([][]jetstream.PubAckFuture, len(writes))
	errs := make([]error, len(writes))
	for k, w := range writes {
		for _, m := range w.seal {
			f, err := p.js.PublishMsgAsync(m)
			if err != nil {
				errs[k] = err
				break
			}
			futs[k] = append(futs[k], f)
		}
	}
	out := writes[:0:0]
	for k, w := range writes {
		err := errs[k]
		for _, f := range futs[k] {
			select {
			case <-f.Ok():
			case e := <-f.Err():
				err = cmp.Or(err, e)
			case <-ctx.Done():
				err = cmp.Or(err, ctx.Err())
			}
		}
		if err != nil {
			p.forget(w.id)
			fill(results[w.i], fmt.Errorf("projection %q: history index: %w", w.id, err))
			continue
		}
		out = append(out, w)
	}
	return out
}
