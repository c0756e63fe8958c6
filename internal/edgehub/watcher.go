// Package edgehub is what edges and their hub add to nats' sourcing: the epochs an edge records
// (where each run's events begin) and the hub's watcher of its sources (a stalled source restarted,
// an edge's lost events repaired in the aggregate). docs/topologies.md says why.
package edgehub

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/bootstrap"
	"github.com/orderstore/orderstore/internal/ingest"
	"github.com/orderstore/orderstore/status"
)

// A hub's sources, watched: docs/topologies.md ("Recovery after a link loss") says why (nats' own
// backoff, upstream #6206, #8346) and how. An edge with more events whose source has not advanced
// for sourceKickAfter gets its source removed and added back; one behind for sourceStallAfter is
// flagged stalled.
const (
	sourceWatchEvery = time.Second
	sourceKickAfter  = 3 * time.Second
	sourceKickEvery  = 10 * time.Second
	sourceStallAfter = 30 * time.Second
)

// Config is what the watcher needs of the hub's configuration.
type Config struct {
	Edges []string // the edges' names (their JetStream domains)
	// Stream is the edges' stream's name (the same on every edge).
	Stream string
	// Spec declares the hub's aggregate stream (with its sources) and its consumer.
	Spec bootstrap.Spec
	// DeadLetterStream takes the events an edge lost, on subjects with
	// DeadLetterPrefix (the processor's dead-letter subjects).
	DeadLetterStream, DeadLetterPrefix string
	// EpochHeader is the header each event's epoch is stamped on (by the edge's admission).
	EpochHeader string
}

// Watcher watches a hub's sources; Run runs it, Sources reports them.
type Watcher struct {
	cfg     Config
	js      jetstream.JetStream   // the hub's own streams
	edges   map[string]*nats.Conn // each edge's streams, over the leaf links (an inbox of its own)
	log     *slog.Logger
	mu      sync.Mutex
	st      map[string]*sourceState
	checked map[[2]string]bool // the (edge, epoch) boundaries checked, by Run's goroutine alone
}

type sourceState struct {
	status.SourceStatus
	lastKick time.Time
}

// New returns the watcher of the hub's sources: js reaches the hub's own streams, edges each edge's
// (over the leaf links, on an inbox of its own).
func New(cfg Config, js jetstream.JetStream, edges map[string]*nats.Conn, log *slog.Logger) *Watcher {
	if cfg.EpochHeader == "" || cfg.DeadLetterPrefix == "" || cfg.Spec.Aggregate == nil {
		// Without them every copy would look lost at its edge.
		panic("edgehub: Config needs EpochHeader, DeadLetterPrefix and an aggregate Spec")
	}
	w := &Watcher{cfg: cfg, js: js, edges: edges, log: log, st: map[string]*sourceState{}, checked: map[[2]string]bool{}}
	for _, e := range cfg.Edges {
		w.st[e] = &sourceState{SourceStatus: status.SourceStatus{Edge: e}}
	}
	return w
}

func (w *Watcher) Run(ctx context.Context) error {
	t := time.NewTicker(sourceWatchEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			w.check(ctx)
		}
	}
}

func (w *Watcher) check(ctx context.Context) {
	agg := w.cfg.Spec.Aggregate
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	st, err := w.js.Stream(cctx, agg.Name)
	if err != nil {
		return
	}
	info := st.CachedInfo()
	if len(info.Config.Sources) < len(agg.Sources) {
		// A kick that removed a source and could not add it back.
		if _, err := w.js.UpdateStream(cctx, *agg); err != nil {
			w.log.Warn("hub: restore the aggregate stream's sources", "stream", agg.Name, "err", err)
		}
	}
	nats := map[string]*jetstream.StreamSourceInfo{}
	for _, si := range info.Sources {
		if si.External != nil {
			nats[si.External.APIPrefix] = si
		}
	}
	for _, edge := range w.cfg.Edges {
		s := status.SourceStatus{Edge: edge}
		// A timeout per edge (slow ones starve no other); the aggregate first (it lags the edge).
		ectx, ecancel := context.WithTimeout(ctx, 2*time.Second)
		m, herr := st.GetLastMsgForSubject(ectx, edge+".>")
		if herr == nil {
			s.SourcedSeq = sourceSeq(m)
		}
		var epochs []epochStart
		if ejs, err := jetstream.NewWithDomain(w.edges[edge], edge); err == nil {
			if es, err := ejs.Stream(ectx, w.cfg.Stream); err == nil {
				s.Reachable, s.EdgeLastSeq = true, es.CachedInfo().State.LastSeq
				// What the edge's limits removed is not to be sourced any more.
				s.SourcedSeq = max(s.SourcedSeq, es.CachedInfo().State.FirstSeq-1)
				epochs = parseEpochs(es.CachedInfo().Config.Metadata[epochsKey])
			} else {
				s.Error = "edge: " + err.Error()
			}
		}
		ecancel()
		if herr != nil && !errors.Is(herr, jetstream.ErrMsgNotFound) { // how far it got is unknown
			s.Reachable, s.Error = false, strings.TrimPrefix(s.Error+"; ", "; ")+"aggregate: "+herr.Error()
		}
		if s.Reachable {
			// The edge's sequence went backwards (it lost events the
			// aggregate copied): an alarm until the repair below ends it.
			s.Regressed = s.EdgeLastSeq < s.SourcedSeq
			w.checkEpochs(ctx, edge, epochs, s.SourcedSeq)
		}
		if si := nats["$JS."+edge+".API"]; si != nil {
			s.NATSLag, s.ActiveSeconds = si.Lag, si.Active.Seconds()
			if si.Error != nil {
				s.Error = strings.TrimPrefix(s.Error+"; ", "; ") + "source: " + si.Error.Error()
			}
		}
		w.update(ctx, edge, s)
	}
}

// update records edge's new state and kicks its source when it is stuck.
func (w *Watcher) update(ctx context.Context, edge string, s status.SourceStatus) {
	w.mu.Lock()
	prev := w.st[edge]
	now := time.Now()
	s.LastAdvance = prev.LastAdvance
	s.LostEvents, s.Regressions, s.LastRegression = prev.LostEvents, prev.Regressions, prev.LastRegression
	if s.SourcedSeq > prev.SourcedSeq || s.LastAdvance.IsZero() || s.EdgeLastSeq <= s.SourcedSeq {
		s.LastAdvance = now
	}
	if s.Reachable && s.EdgeLastSeq > s.SourcedSeq {
		s.Behind, s.BehindSeconds = s.EdgeLastSeq-s.SourcedSeq, now.Sub(s.LastAdvance).Seconds()
	} else if !s.Reachable {
		s.SourcedSeq = max(s.SourcedSeq, prev.SourcedSeq)
	}
	s.Stalled = s.Behind > 0 && now.Sub(s.LastAdvance) > sourceStallAfter
	kick := s.Behind > 0 && now.Sub(s.LastAdvance) > sourceKickAfter && now.Sub(prev.lastKick) > sourceKickEvery
	prev.SourceStatus = s
	if kick {
		prev.lastKick = now
	}
	w.mu.Unlock()
	if kick {
		w.kick(ctx, edge, s)
	}
}

// kick makes nats recreate edge's source consumer: the aggregate without the source, then with it.
func (w *Watcher) kick(ctx context.Context, edge string, s status.SourceStatus) {
	agg := *w.cfg.Spec.Aggregate
	kctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := w.js.UpdateStream(kctx, withoutSource(agg, edge))
	if err == nil {
		_, err = w.js.UpdateStream(kctx, agg)
	}
	w.log.Info("hub: source restarted", "edge", edge, "behind", s.Behind, "sourced_seq", s.SourcedSeq, "edge_last_seq", s.EdgeLastSeq,
		"stalled_for", time.Since(s.LastAdvance).Round(time.Second).String(), "err", err)
}

// withoutSource is agg without edge's source.
func withoutSource(agg jetstream.StreamConfig, edge string) jetstream.StreamConfig {
	agg.Sources = slices.DeleteFunc(slices.Clone(agg.Sources), func(ss *jetstream.StreamSource) bool {
		return ss.External != nil && ss.External.APIPrefix == "$JS."+edge+".API"
	})
	return agg
}

func (w *Watcher) Sources() []status.SourceStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []status.SourceStatus
	for _, e := range w.cfg.Edges {
		out = append(out, w.st[e].SourceStatus)
	}
	return out
}

// sourceSeq is a copy's origin sequence, from Nats-Stream-Source ("<stream index name> <seq> ...").
func sourceSeq(m *jetstream.RawStreamMsg) uint64 {
	if f := strings.Fields(m.Header.Get(ingest.StreamSourceHeader)); len(f) >= 2 {
		n, _ := strconv.ParseUint(f[1], 10, 64)
		return n
	}
	return 0
}
