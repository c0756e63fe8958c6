package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/bench/benchkit"
)

// workload is the event sequence of one stream: n events, of which targets orders get exactly
// perTarget each, spread evenly over the whole stream (target t's event j sits near position
// (j*targets+t)*n/(targets*perTarget)), and every other event goes to one of the background orders
// (benchkit.Orders, a fixed seed).
type workload struct {
	*benchkit.Orders      // the background orders
	n, targets, perTarget int
	tcount                []int32 // events so far per target
	slots                 int     // targets*perTarget
	nextSlot              int
	i                     int // next position
}

func newWorkload(seed uint64, n, targets, perTarget, eventsPerOrder int) (*workload, error) {
	slots := targets * perTarget
	if slots > n/2 {
		return nil, fmt.Errorf("%d target orders of %d events do not fit in half of %d events", targets, perTarget, n)
	}
	bg := max(1, (n-slots)/max(eventsPerOrder, 1))
	return &workload{Orders: benchkit.NewOrders(seed, 0x5eed, bg), n: n, targets: targets, perTarget: perTarget,
		slots: slots, tcount: make([]int32, targets)}, nil
}

// slotPos is the position of target slot k: the middle of its 1/slots of the stream.
func (w *workload) slotPos(k int) int { return int((int64(2*k+1) * int64(w.n)) / int64(2*w.slots)) }

// next returns the next event: its order's id, its type, and which target's event it is (tag:
// target*perTarget + its index; -1: a background order's).
func (w *workload) next() (id string, typ string, tag int) {
	pos := w.i
	w.i++
	if w.nextSlot < w.slots && w.slotPos(w.nextSlot) == pos {
		target, j := w.nextSlot%w.targets, w.nextSlot/w.targets
		w.nextSlot++
		t := w.Type(w.tcount[target])
		w.tcount[target]++
		return targetID(target), benchkit.Types[t], target*w.perTarget + j
	}
	o, t := w.Next()
	return fmt.Sprintf("order-%07d", o), benchkit.Types[t], -1
}

func targetID(t int) string { return "target-" + strconv.Itoa(t) }

// publish publishes the workload's n events, async with up to window unacked, and returns once
// every one is acked, with the stream sequences of each target's events (in stream order) and how
// many publishes were resent. A publish turned away for now (benchkit.Retryable) is sent again
// after a pause, as a producer would.
func publish(ctx context.Context, js jetstream.JetStream, w *workload, window int) ([][]uint64, int, time.Duration, error) {
	seqs := make([][]uint64, w.targets)
	for t := range seqs {
		seqs[t] = make([]uint64, w.perTarget)
	}
	win := benchkit.NewWindow(js, window)
	win.Retry = benchkit.Retryable
	win.OnAck = func(tag int, ack *jetstream.PubAck) error {
		if tag >= 0 { // target tag/perTarget's event tag%perTarget
			seqs[tag/w.perTarget][tag%w.perTarget] = ack.Sequence
		}
		return nil
	}
	t0 := time.Now()
	err := win.PublishAll(ctx, w.n, func() (*nats.Msg, int) {
		id, typ, tag := w.next()
		return benchkit.EventMsg(id, typ, 0), tag
	})
	if err != nil {
		return nil, win.Retries, 0, err
	}
	// An event sent again may have been stored after the target's next.
	for _, s := range seqs {
		slices.Sort(s)
	}
	return seqs, win.Retries, time.Since(t0), nil
}
