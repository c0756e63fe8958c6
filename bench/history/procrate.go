package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/bench/benchkit"
	"github.com/orderstore/orderstore/bootstrap"
	"github.com/orderstore/orderstore/processor"
)

// procRun is one run of the processor-rate step.
type procRun struct {
	Index bool // the projection kept the history index
	Rep   int
	N     int
	Dur   time.Duration
	CPU   time.Duration
	// Others is the CPU share of the machine's other processes during
	// the run: a run that shared the cores is slower for it.
	Others string
	Stats  processor.Stats
}

func (r procRun) rate() float64 {
	if r.Dur <= 0 {
		return 0
	}
	return float64(r.N) / r.Dur.Seconds()
}

// cpuPerEvent is the process's CPU time per event, in µs.
func (r procRun) cpuPerEvent() float64 {
	if r.N <= 0 {
		return 0
	}
	return float64(r.CPU) / float64(time.Microsecond) / float64(r.N)
}

func (r procRun) label() string {
	if r.Index {
		return "with the index"
	}
	return "without the index"
}

// procRate starts a fresh appliance without its processor, publishes the
// workload of n events, then starts a processor as the appliance builds it
// (cfg.ProcessorConfig over the projection of orderstore.NewProjection,
// or the same projection without SetHistory) and times it from its start
// until its consumer has nothing pending or unacked (processor.Lag).
func procRate(ctx context.Context, o options, n int, index bool, rep int) (procRun, error) {
	r := procRun{Index: index, Rep: rep, N: n}
	logf("=== processor rate %s, rep %d: %s events", r.label(), rep, num(n))
	w, err := newWorkload(o.seed+uint64(rep), n, o.targets, o.perTarget, o.eventsPerOrder)
	if err != nil {
		return r, err
	}
	e, err := newEnv(ctx, o, n, false)
	if err != nil {
		return r, err
	}
	defer e.close()
	// The appliance without its processor does not declare its consumer:
	// declare the whole spec, as the appliance would.
	djs, err := e.connect(false, "bench-history-declare")
	if err != nil {
		return r, err
	}
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if _, err := bootstrap.Declare(sctx, djs, e.cfg.DeclareSpec(), nil); err != nil {
		return r, err
	}
	pjs, err := e.publisherJS(o)
	if err != nil {
		return r, err
	}
	seqs, retries, loadDur, err := publish(ctx, pjs, w, o.window)
	if err != nil {
		return r, err
	}
	logf("   published in %s (%d sent again); starting the processor", secs(loadDur), retries)

	js, err := e.connect(false, "bench-history-processor")
	if err != nil {
		return r, err
	}
	lagJS, err := e.connect(false, "bench-history-lag") // as the admin API would
	if err != nil {
		return r, err
	}
	var proj *processor.Projection
	if index {
		proj, err = orderstore.NewProjection(ctx, js, e.cfg) // as the appliance wires it
		if err != nil {
			return r, err
		}
	} else {
		// orderstore.NewProjection without SetHistory.
		kv, err := js.KeyValue(ctx, e.cfg.Processor.ProjectionBucket)
		if err != nil {
			return r, err
		}
		proj = processor.NewProjection(js, kv)
		proj.SetAtomicBatches(e.cfg.DurabilityMode() == orderstore.DurabilityAlways)
	}
	pc := e.cfg.ProcessorConfig(proj)
	pc.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("component", "processor")
	p, err := processor.New(js, pc)
	if err != nil {
		return r, err
	}
	stopProf, err := startProfile(o, fmt.Sprintf("proc-%s-%d", map[bool]string{true: "index", false: "noindex"}[index], rep))
	if err != nil {
		return r, err
	}
	defer stopProf()
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	t0, c0, m0 := time.Now(), cpuTime(), benchkit.MachineBusy()
	go func() { done <- p.Run(rctx) }()
	err = caughtUp(ctx, lagJS, e, p, done, uint64(n), o.catchupTimeout)
	r.Dur, r.CPU, r.Others = time.Since(t0), cpuTime()-c0, othersShare(m0, c0, t0)
	stopProf()
	r.Stats = p.Stats()
	stop()
	select {
	case rerr := <-done:
		if err == nil && rerr != nil && !errors.Is(rerr, context.Canceled) {
			err = rerr
		}
	case <-time.After(60 * time.Second):
		err = errors.Join(err, errors.New("processor did not stop within 60s"))
	}
	if err != nil {
		return r, err
	}
	logf("   %s events/s (%s, CPU %s, other processes %s)", num(int(r.rate())), secs(r.Dur), benchkit.CPUShare(r.CPU, r.Dur), r.Others)
	// The target orders were projected; with the index, their history
	// lists their events.
	stream, err := js.Stream(ctx, e.cfg.Stream.Name)
	if err != nil {
		return r, err
	}
	for t := range o.targets {
		ord, err := proj.Get(ctx, targetID(t))
		if err != nil || ord.Events != o.perTarget {
			return r, fmt.Errorf("%s: %d events projected (%v), want %d", targetID(t), ord.Events, err, o.perTarget)
		}
		page, err := proj.History(ctx, stream, targetID(t), 0, o.perTarget)
		switch {
		case index && err != nil:
			return r, fmt.Errorf("history of %s: %w", targetID(t), err)
		case index:
			if err := checkHistory(page, seqs[t]); err != nil {
				return r, err
			}
		case !errors.Is(err, processor.ErrNoHistory):
			return r, fmt.Errorf("history of %s without the index: %v, want ErrNoHistory", targetID(t), err)
		}
	}
	return r, nil
}

// caughtUp polls processor.Lag until the durable has nothing pending or
// unacked and the processor has settled want events.
func caughtUp(ctx context.Context, js jetstream.JetStream, e *env, p *processor.Processor, done chan error, want uint64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	lastLog := time.Now()
	for {
		if err := sleep(ctx, 25*time.Millisecond); err != nil {
			return err
		}
		select {
		case err := <-done:
			done <- err
			return fmt.Errorf("processor stopped: %v", err)
		default:
		}
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		l, err := processor.Lag(lctx, js, e.cfg.Stream.Name, e.cfg.Processor.Durable)
		cancel()
		st := p.Stats()
		if err == nil && l.Pending == 0 && l.AckPending == 0 && st.Processed+st.Duplicates+st.DeadLettered >= want {
			if st.DeadLettered > 0 || st.Processed != want {
				return fmt.Errorf("processor: %d processed, %d dead-lettered, %d duplicates of %d events", st.Processed, st.DeadLettered, st.Duplicates, want)
			}
			return nil
		}
		if time.Since(lastLog) >= 10*time.Second {
			lastLog = time.Now()
			logf("   processed %s, pending %s, ack pending %d", num(int(st.Processed)), num(int(l.Pending)), l.AckPending)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not caught up after %s: pending %d, ack pending %d, processed %d", timeout, l.Pending, l.AckPending, st.Processed)
		}
	}
}
