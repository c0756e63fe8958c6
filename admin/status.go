package admin

import (
	"context"
	"net/http"
	"time"

	"github.com/orderstore/orderstore/status"
)

// collectStatus gathers everything; parts that fail are named in Errors
// instead of failing the whole.
func (s *Server) collectStatus(ctx context.Context, b *Backend) status.Status {
	st := status.Status{Durability: s.durability(), Build: s.cfg.Build, Time: time.Now().UTC(), Recovery: b.Recovery,
		Stream:      status.StreamStatus{Name: s.cfg.Stream, MaxBytes: s.cfg.MaxBytes, MaxMsgs: s.cfg.MaxMsgs, MaxAgeSeconds: s.cfg.MaxAge.Seconds()},
		DeadLetters: status.DeadLetterStatus{Stream: s.cfg.DeadLetterStream}, Projection: status.ProjectionStatus{Bucket: s.cfg.ProjectionBucket},
		Store: status.StoreStatus{Dir: s.cfg.StoreDir, Encrypted: s.cfg.Cipher != "", Cipher: s.cfg.Cipher}}
	if b.Guard != nil {
		st.Guard = b.Guard()
	}
	if b.Ingest != nil {
		st.Ingest = b.Ingest()
	}
	if b.Validation != nil {
		st.Validation = b.Validation()
	}
	if b.Rebuild != nil {
		st.Rebuild = b.Rebuild.RebuildStatus()
	}
	if b.OrderIndex != nil {
		st.Orders = ordersStatus(b.OrderIndex, s.cfg.StaleAfter)
	}
	st.Status, st.Checks = s.Readiness(ctx)
	fail := func(err error) { st.Errors = append(st.Errors, err.Error()) }
	if str, err := b.JS.Stream(ctx, s.cfg.Stream); err != nil {
		fail(err)
	} else {
		i := str.CachedInfo()
		st.Stream.Messages, st.Stream.Bytes = i.State.Msgs, i.State.Bytes
		st.Stream.FirstSeq, st.Stream.LastSeq = i.State.FirstSeq, i.State.LastSeq
		if i.State.Msgs > 0 {
			st.Stream.FirstTime = i.State.FirstTime
			st.Stream.OldestAgeSeconds = max(time.Since(i.State.FirstTime).Seconds(), 0)
		}
		if st.Stream.MaxBytes > 0 {
			st.Stream.BytesPercent = 100 * float64(i.State.Bytes) / float64(st.Stream.MaxBytes)
		}
	}
	if b.Processor != nil {
		ps := b.Processor.Stats()
		st.Processor = &ps
		if lag, err := b.Processor.Lag(ctx); err != nil {
			fail(err)
		} else {
			st.Consumer = &status.ConsumerStatus{Name: s.cfg.Durable, Stream: s.consumerStream(), LagInfo: lag}
		}
	}
	if d, err := b.JS.Stream(ctx, s.cfg.DeadLetterStream); err != nil {
		fail(err)
	} else {
		i := d.CachedInfo()
		st.DeadLetters.Messages, st.DeadLetters.Bytes, st.DeadLetters.MaxBytes = i.State.Msgs, i.State.Bytes, i.Config.MaxBytes
	}
	if s.cfg.ProjectionBucket != "" {
		if p, err := b.JS.Stream(ctx, "KV_"+s.cfg.ProjectionBucket); err != nil {
			fail(err)
		} else {
			i := p.CachedInfo()
			st.Projection.Orders, st.Projection.Bytes, st.Projection.MaxBytes = i.State.Msgs, i.State.Bytes, i.Config.MaxBytes
		}
	}
	if b.Topology != nil {
		st.Topology = b.Topology(ctx)
	}
	if ai, err := b.JS.AccountInfo(ctx); err != nil {
		fail(err)
	} else {
		st.Store.JetStreamBytes, st.Store.JetStreamMaxBytes = ai.Store, s.maxStore(ai)
	}
	if s.cfg.FreeBytes != nil {
		if n, err := s.cfg.FreeBytes(); err != nil {
			fail(err)
		} else {
			st.Store.FreeBytes = n
		}
	}
	return st
}

func (s *Server) status(w http.ResponseWriter, r *http.Request, b *Backend) error {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	return writeResult(w, http.StatusOK, s.collectStatus(ctx, b), nil)
}
