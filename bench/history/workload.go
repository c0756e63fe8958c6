package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var types = []string{"created", "paid", "shipped", "delivered", "cancelled"}

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
	if c < 4 {
		return id, types[c], target, j
	}
	switch x := w.r.IntN(10); {
	case x < 3:
		typ = types[1]
	case x < 6:
		typ = types[2]
	case x < 9:
		typ = types[3]
	default:
		typ = types[4]
	}
	return id, typ, target, j
}

func targetID(t int) string { return "target-" + strconv.Itoa(t) }

func pad7(n int) string {
	s := strconv.Itoa(n)
	for len(s) < 7 {
		s = "0" + s
	}
	return s
}

func eventMsg(id, typ string) *nats.Msg {
	data := make([]byte, 0, 64)
	data = append(data, `{"order_id":"`...)
	data = append(data, id...)
	data = append(data, `","status":"`...)
	data = append(data, typ...)
	data = append(data, `"}`...)
	return &nats.Msg{Subject: "orders." + typ, Data: data}
}

// targetSeqs are the stream sequences of each target order's events, in
// stream order.
type targetSeqs [][]uint64

// retryable is a publish the appliance asks to send again: a 429 (its
// ingest service sheds load: "publish it again after a moment") or no
// responders (the account's publishes are paused).
func retryable(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		(errors.As(err, &apiErr) && apiErr.Code == 429)
}

// publish publishes the workload's n events, async with up to window
// unacked, and returns once every one is acked, with the target orders'
// sequences and how many publishes were sent again. A publish the
// appliance turns away for now (retryable) is sent again after a pause, as
// a producer would.
func publish(ctx context.Context, js jetstream.JetStream, w *workload, window int) (targetSeqs, int, time.Duration, error) {
	seqs := make(targetSeqs, w.targets)
	for t := range seqs {
		seqs[t] = make([]uint64, w.perTarget)
	}
	type inflight struct {
		f         jetstream.PubAckFuture
		target, j int
	}
	ring := make([]inflight, window)
	retries := 0
	wait := func(p inflight) error {
		for attempt := 0; ; attempt++ {
			select {
			case ack := <-p.f.Ok():
				if p.target >= 0 {
					seqs[p.target][p.j] = ack.Sequence
				}
				return nil
			case err := <-p.f.Err():
				if !retryable(err) || attempt >= 100 {
					return fmt.Errorf("publish: %w", err)
				}
				retries++
				if err := sleep(ctx, 20*time.Millisecond); err != nil {
					return err
				}
				if p.f, err = js.PublishMsgAsync(p.f.Msg()); err != nil {
					return fmt.Errorf("publish again: %w", err)
				}
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	t0 := time.Now()
	lastLog := t0
	for i := range w.n {
		if i%1024 == 0 {
			if ctx.Err() != nil {
				return nil, retries, 0, ctx.Err()
			}
			if time.Since(lastLog) >= 10*time.Second {
				lastLog = time.Now()
				logf("   published %s of %s (%d sent again)", num(i), num(w.n), retries)
			}
		}
		slot := i % window
		if ring[slot].f != nil {
			if err := wait(ring[slot]); err != nil {
				return nil, retries, 0, err
			}
		}
		id, typ, target, j := w.next()
		f, err := js.PublishMsgAsync(eventMsg(id, typ))
		if err != nil {
			return nil, retries, 0, fmt.Errorf("publish %d: %w", i, err)
		}
		ring[slot] = inflight{f, target, j}
	}
	for _, p := range ring {
		if p.f != nil {
			if err := wait(p); err != nil {
				return nil, retries, 0, err
			}
		}
	}
	// An event sent again may have been stored after the target's next.
	for _, s := range seqs {
		slices.Sort(s)
	}
	return seqs, retries, time.Since(t0), nil
}
