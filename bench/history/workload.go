package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/bench/benchkit"
)

// workload is the event sequence of one stream: n events, of which
// targets orders get exactly perTarget each, spread evenly over the whole
// stream (target t's event j sits near position (j*targets+t)*n/(targets*perTarget)),
// and every other event goes to one of the background orders, picked
// uniformly at random (a fixed seed). An order's first four events are
// created, paid, shipped, delivered; later ones paid, shipped, delivered
// (30% each) or cancelled (10%).
type workload struct {
	n, targets, perTarget int
	r                     *rand.Rand
	count                 []int32 // events so far per background order
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
	return &workload{n: n, targets: targets, perTarget: perTarget, slots: slots,
		r: rand.New(rand.NewPCG(seed, 0x5eed)), count: make([]int32, bg), tcount: make([]int32, targets)}, nil
}

// slotPos is the position of target slot k: the middle of its 1/slots of
// the stream.
func (w *workload) slotPos(k int) int {
	return int((int64(2*k+1) * int64(w.n)) / int64(2*w.slots))
}

// next returns the next event: its order's id, its type, and which
// target and which of the target's events it is (target -1: a background
// order).
func (w *workload) next() (id string, typ string, target, j int) {
	pos := w.i
	w.i++
	target = -1
	var c int32
	if w.nextSlot < w.slots && w.slotPos(w.nextSlot) == pos {
		target, j = w.nextSlot%w.targets, w.nextSlot/w.targets
		w.nextSlot++
		c = w.tcount[target]
		w.tcount[target]++
		id = targetID(target)
	} else {
		o := w.r.IntN(len(w.count))
		c = w.count[o]
		w.count[o]++
		id = "order-" + pad7(o)
	}
	return id, benchkit.Types[benchkit.NextType(w.r, c)], target, j
}

func targetID(t int) string { return "target-" + strconv.Itoa(t) }

func pad7(n int) string {
	s := strconv.Itoa(n)
	for len(s) < 7 {
		s = "0" + s
	}
	return s
}

// targetSeqs are the stream sequences of each target order's events, in
// stream order.
type targetSeqs [][]uint64

// publish publishes the workload's n events, async with up to window
// unacked, and returns once every one is acked, with the target orders'
// sequences and how many publishes were sent again. A publish the
// appliance turns away for now (benchkit.Retryable) is sent again after a
// pause, as a producer would.
func publish(ctx context.Context, js jetstream.JetStream, w *workload, window int) (targetSeqs, int, time.Duration, error) {
	seqs := make(targetSeqs, w.targets)
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
	lastLog := t0
	for i := range w.n {
		if i%1024 == 0 {
			if ctx.Err() != nil {
				return nil, win.Retries, 0, ctx.Err()
			}
			if time.Since(lastLog) >= 10*time.Second {
				lastLog = time.Now()
				benchkit.Logf("   published %s of %s (%d sent again)", benchkit.Num(i), benchkit.Num(w.n), win.Retries)
			}
		}
		id, typ, target, j := w.next()
		tag := -1
		if target >= 0 {
			tag = target*w.perTarget + j
		}
		if err := win.Publish(ctx, benchkit.EventMsg(id, typ, 0), tag); err != nil {
			return nil, win.Retries, 0, err
		}
	}
	if err := win.Drain(ctx); err != nil {
		return nil, win.Retries, 0, err
	}
	// An event sent again may have been stored after the target's next.
	for _, s := range seqs {
		slices.Sort(s)
	}
	return seqs, win.Retries, time.Since(t0), nil
}
