package main

import (
	"context"
	"errors"
	"net/http"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/admin"
	"github.com/orderstore/orderstore/processor"
)

// The admin package states what it needs as small interfaces; these
// adapters are the wiring (siblings do not import each other).

type procAdapter struct {
	p               *processor.Processor
	js              jetstream.JetStream
	stream, durable string
}

func (a procAdapter) Stats() admin.ProcessorStats {
	s := a.p.Stats()
	return admin.ProcessorStats{Running: s.Running, Processed: s.Processed, Failed: s.Failed, DeadLettered: s.DeadLettered,
		Poison: s.Poison, Duplicates: s.Duplicates, LastAppliedSeq: s.LastAppliedSeq}
}

func (a procAdapter) Lag(ctx context.Context) (admin.Lag, error) {
	l, err := processor.Lag(ctx, a.js, a.stream, a.durable)
	return admin.Lag{Pending: l.Pending, AckPending: l.AckPending, Redelivered: l.Redelivered, AckFloor: l.AckFloor, SecondsBehind: l.SecondsBehind}, err
}

type dlqAdapter struct {
	js     jetstream.JetStream
	stream string
}

func (a dlqAdapter) ListDeadLetters(ctx context.Context, from uint64, limit int) (any, uint64, error) {
	items, next, err := processor.ListDeadLetters(ctx, a.js, a.stream, from, limit)
	if items == nil {
		items = []processor.DeadLetter{}
	}
	return items, next, err
}

func (a dlqAdapter) LatestDeadLetters(ctx context.Context, n int) (any, error) {
	s, err := a.js.Stream(ctx, a.stream)
	if err != nil {
		return nil, err
	}
	st := s.CachedInfo().State
	from := st.FirstSeq
	if st.LastSeq >= uint64(n) && st.LastSeq-uint64(n)+1 > from {
		from = st.LastSeq - uint64(n) + 1
	}
	items, _, err := processor.ListDeadLetters(ctx, a.js, a.stream, from, n)
	if items == nil {
		items = []processor.DeadLetter{}
	}
	return items, err
}

func (a dlqAdapter) ReplayDeadLetter(ctx context.Context, seq uint64) (uint64, error) {
	n, err := processor.Replay(ctx, a.js, a.stream, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, admin.ErrNotFound
	}
	return n, err
}

type ordersAdapter struct{ p *processor.Projection }

func (a ordersAdapter) Order(ctx context.Context, id string) (any, error) {
	if !processor.ValidOrderID(id) {
		return nil, admin.ErrNotFound
	}
	o, err := a.p.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, admin.ErrNotFound
	}
	return o, err
}

// monitoring mounts nats-server's own monitoring endpoints; until the
// server exists they answer 503.
func monitoring(srv func() *server.Server) map[string]http.HandlerFunc {
	wrap := func(h func(*server.Server) http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			s := srv()
			if s == nil {
				http.Error(w, "starting", http.StatusServiceUnavailable)
				return
			}
			h(s)(w, r)
		}
	}
	return map[string]http.HandlerFunc{
		"/varz":     wrap(func(s *server.Server) http.HandlerFunc { return s.HandleVarz }),
		"/jsz":      wrap(func(s *server.Server) http.HandlerFunc { return s.HandleJsz }),
		"/connz":    wrap(func(s *server.Server) http.HandlerFunc { return s.HandleConnz }),
		"/healthz":  wrap(func(s *server.Server) http.HandlerFunc { return s.HandleHealthz }),
		"/subsz":    wrap(func(s *server.Server) http.HandlerFunc { return s.HandleSubsz }),
		"/accountz": wrap(func(s *server.Server) http.HandlerFunc { return s.HandleAccountz }),
		"/leafz":    wrap(func(s *server.Server) http.HandlerFunc { return s.HandleLeafz }),
		"/routez":   wrap(func(s *server.Server) http.HandlerFunc { return s.HandleRoutez }),
	}
}
