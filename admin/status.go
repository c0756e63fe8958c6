package admin

import (
	"context"
	"net/http"
	"time"

	"github.com/orderstore/orderstore/status"
)

// collectStatus gathers everything; parts that fail are named in Errors, not failing the whole.
func (s *Server) collectStatus(ctx context.Context, b *Backend) status.Status {
	st := status.Status{Durability: s.durability(), Build: s.cfg.Build, Time: time.Now().UTC(), Recovery: b.Recovery,
		Stream:      status.StreamStatus{Name: s.cfg.Stream, MaxBytes: s.cfg.MaxBytes, MaxMsgs: s.cfg.MaxMsgs, MaxAgeSeconds: s.cfg.MaxAge.Seconds()},
		DeadLetters: status.DeadLetterStatus{Stream: s.cfg.DeadLetterStream}, Projection: status.ProjectionStatus{Bucket: s.cfg.ProjectionBucket},
		Store: status.StoreStatus{Dir: s.cfg.StoreDir, Encrypted: s.cfg.Cipher != "", Cipher: s.cfg.Cipher},
		Guard: call(b.Guard), Ingest: call(b.Ingest), Validation: call(b.Validation), ConfigReload: call(b.ConfigReload)}
	if b.Rebuild != nil {
		st.Rebuild = b.Rebuild.RebuildStatus()
	}
	if b.OrderIndex != nil {
		st.Orders = ordersStatus(b.OrderIndex, s.cfg.StaleAfter)
	}
	st.Status, st.Checks = s.readiness(ctx, b, &st)
	fail := func(err error) { st.Errors = append(st.Errors, err.Error()) }
	if b.Processor != nil {
		ps := b.Processor.Stats()
		st.Processor = &ps
		if lag, err := b.Processor.Lag(ctx); err != nil {
			fail(err)
		} else {
			st.Consumer = &status.ConsumerStatus{Name: s.cfg.Durable, Stream: s.consumerStream(), LagInfo: lag}
		}
	}
	if b.Topology != nil {
		st.Topology = b.Topology(ctx)
	}
	return st
}

func (s *Server) status(w http.ResponseWriter, r *http.Request, b *Backend) error {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	return writeResult(w, http.StatusOK, s.collectStatus(ctx, b), nil)
}

// call is f's report, or none when f is nil (a Backend's optional reports).
func call[T any](f func() T) (v T) {
	if f != nil {
		v = f()
	}
	return v
}
