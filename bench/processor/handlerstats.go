package main

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
)

// countingHandler counts the processor's "consume" warnings (its ConsumeErrHandler: e.g. a missed
// heartbeat, when the client stalled) and passes every record on. It also keeps the attributes of
// the "processor running" record (batch, partitions, ...), which it sees whatever the level:
// Enabled lets Info through and Handle drops what the inner handler would not print.
type countingHandler struct {
	slog.Handler
	consumeErrs *atomic.Int64
	started     *sync.Map
}

func (h countingHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.Handler.Enabled(ctx, l)
}

func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	switch r.Message {
	case "consume":
		h.consumeErrs.Add(1)
	case "processor running":
		r.Attrs(func(a slog.Attr) bool {
			h.started.Store(a.Key, a.Value.String())
			return true
		})
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return countingHandler{h.Handler.WithAttrs(as), h.consumeErrs, h.started}
}

func (h countingHandler) WithGroup(name string) slog.Handler {
	return countingHandler{h.Handler.WithGroup(name), h.consumeErrs, h.started}
}
