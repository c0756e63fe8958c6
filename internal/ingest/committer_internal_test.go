package ingest

import (
	"maps"
	"testing"
	"time"
)

// The rounds' histograms: cumulative buckets as Prometheus has them, quantiles at a bucket's bound.
func TestCommitterHistograms(t *testing.T) {
	c := NewCommitter("S")
	if st := c.Status(); st.SyncP50Seconds != 0 || st.SyncSeconds.Count != 0 {
		t.Fatalf("no rounds: %+v", st)
	}
	for _, sync := range []time.Duration{300 * time.Microsecond, time.Millisecond, 1500 * time.Microsecond, 3 * time.Millisecond, 7 * time.Second, 7 * time.Second} {
		c.Round("S", 2, sync)
	}
	c.Round("KV_X", 0, time.Millisecond)
	st := c.Status()
	want := map[float64]uint64{0.0005: 1, 0.001: 3, 0.002: 4, 0.005: 5, 0.01: 5, 0.02: 5, 0.05: 5, 0.1: 5, 0.25: 5, 0.5: 5, 1: 5, 2.5: 5}
	if !maps.Equal(st.SyncSeconds.Buckets, want) || st.SyncSeconds.Count != 7 {
		t.Errorf("sync buckets %v (count %d), want %v (7)", st.SyncSeconds.Buckets, st.SyncSeconds.Count, want)
	}
	if st.SyncP50Seconds != 0.002 || st.SyncP99Seconds != 2.5 || st.Acked != 12 || st.Syncs != 7 {
		t.Errorf("p50 %v (want 0.002), p99 %v (want 2.5, the last bound), acked %d (12), syncs %d (7)", st.SyncP50Seconds, st.SyncP99Seconds, st.Acked, st.Syncs)
	}
	if st.BatchEvents.Count != 6 || st.BatchEvents.Buckets[2] != 6 || st.BatchEvents.Buckets[1] != 0 || st.BatchEvents.Sum != 12 {
		t.Errorf("batch histogram %+v", st.BatchEvents)
	}
}
