package ingest

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Where a publish's time goes, for the group-commit benchmark: built only
// with -tags benchtrace (StagesOn), so the appliance's own build records
// nothing; the report is status.IngestStats.Stages. A producer that sets
// StageHeader to its send time in Unix nanoseconds (the benchmark, in the
// same process) gets its leg to the service measured too.
//
//	go run -tags benchtrace ./bench/groupcommit -producers 1 -window 0 -only nats-always,orderstore-group-commit
type stages struct {
	in                         time.Duration // producer's send to the service's take
	at, pub, ack, sync0, sync1 time.Time
}

// StageHeader carries a benchmark producer's send time.
const StageHeader = "Bench-T"

func newStages(m *nats.Msg, at time.Time) *stages {
	if !StagesOn {
		return nil
	}
	s := &stages{at: at}
	if v, err := strconv.ParseInt(m.Header.Get(StageHeader), 10, 64); err == nil {
		s.in = at.Sub(time.Unix(0, v))
	}
	return s
}

var stageLog struct {
	sync.Mutex
	rows [][7]time.Duration
}

// done records s, answered at ans.
func (s *stages) done(ans time.Time) {
	if s == nil || s.ack.IsZero() {
		return
	}
	stageLog.Lock()
	if len(stageLog.rows) < 1_000_000 {
		stageLog.rows = append(stageLog.rows, [7]time.Duration{s.in, s.pub.Sub(s.at), s.ack.Sub(s.pub),
			s.sync0.Sub(s.ack), s.sync1.Sub(s.sync0), ans.Sub(s.sync1), ans.Sub(s.at)})
	}
	stageLog.Unlock()
}

// StageReport returns the median and p90 of each stage recorded since the
// last report ("" if none) and starts over.
func StageReport() string {
	stageLog.Lock()
	rows := stageLog.rows
	stageLog.rows = nil
	stageLog.Unlock()
	if len(rows) == 0 {
		return ""
	}
	out := fmt.Sprintf("    stages of %d publishes (p50 / p90 / p99 / max):\n", len(rows))
	for k, name := range []string{"producer's send to the service's take", "take to the stream publish",
		"stream publish to its ack", "ack to the sync's start", "sync", "sync's end to the answer sent", "in the service"} {
		v := make([]time.Duration, len(rows))
		for i := range rows {
			v[i] = rows[i][k]
		}
		slices.Sort(v)
		out += fmt.Sprintf("      %-40s %8s %8s %8s %8s\n", name, v[len(v)/2].Round(time.Microsecond), v[len(v)*9/10].Round(time.Microsecond),
			v[len(v)*99/100].Round(time.Microsecond), v[len(v)-1].Round(time.Microsecond))
	}
	return out
}
