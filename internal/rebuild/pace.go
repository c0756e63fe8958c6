package rebuild

import (
	"cmp"
	"context"
	"time"
)

// pace sets the fold's duty after a step of n events (while producers publish: see minIngestToPace;
// otherwise it runs flat out), then sleeps Config.Pace.
func (f *folder) pace(ctx context.Context, n int, work time.Duration) error {
	r := f.r
	work -= f.rested
	f.rested = 0
	if n > 0 && work > 0 {
		rate := float64(n) / work.Seconds()
		f.foldRate = 0.8*cmp.Or(f.foldRate, rate) + 0.2*rate
	}
	if since := time.Since(f.lastHeadAt); since >= time.Second {
		if si, err := f.stream.Info(ctx); err == nil {
			head := si.State.LastSeq
			f.ingest = float64(head-min(head, f.lastHead)) / since.Seconds()
			f.lastHead, f.lastHeadAt = head, time.Now()
			r.update(func() { f.st.Head = max(f.st.Head, head) })
		}
	}
	f.duty = 1
	if f.ingest >= minIngestToPace && f.foldRate > 0 {
		target := max(foldAhead*f.ingest, f.ingest+minGain)
		f.duty = min(max(target/f.foldRate, minDuty), 1)
	}
	r.update(func() { f.st.Paced = f.duty < 1 })
	if r.cfg.Pace <= 0 {
		return nil
	}
	return sleep(ctx, r.cfg.Pace)
}

// yield sleeps after work so that the fold works the duty share of the
// time (apply calls it after each chunk while paced).
func (f *folder) yield(ctx context.Context, work time.Duration) error {
	if f.duty >= 1 {
		return nil
	}
	rest := time.Duration(float64(work) * (1/f.duty - 1))
	f.rested += rest
	return sleep(ctx, rest)
}

// sleep waits for d, or until ctx is done (its error).
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// minIngestToPace is the producers' rate (events/s) from which the fold yields the CPU; minDuty the
// least share of the time it works then; foldAhead how much faster than the producers it folds, and
// minGain the least it gains on the head a second, so that beside a trickle of producers it still
// catches up soon. What the fold takes, the producers lose: with these values they kept 0.81 of
// their rate (bench/rebuild, 2 cores, 32 synchronous producers).
const (
	minIngestToPace = 100
	minDuty         = 0.02
	foldAhead       = 1.25
	minGain         = 1000
)
