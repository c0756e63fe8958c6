// Package processor folds order events into a projection. A [Processor],
// made by [New] from a [Config], runs a [Handler] over a durable JetStream
// pull consumer: delivery is at least once, a processor never handles two
// events of one order at once, a failed event is retried with backoff,
// and Run drains what it holds before it returns; [Stats] counts what it
// did. Each [Event] is one stream message, parsed. The built-in handler,
// [Projection], keeps each order's state ([Order]) in a KV bucket, one key
// per order written by compare-and-set, with the stream sequences it
// applied.
//
// The rules that make each event's effect happen once: a handler is
// idempotent on [Event.Sequence] (a redelivery is [ErrDuplicate], and
// acked); with [Config.Sync], a batch is acked only once what its handlers
// wrote is durable; and an event is never both applied and a dead letter
// (a [Withholder] or an [AppliedChecker] is asked before one whose
// deliveries ran out is dead-lettered). A [Config.Exclusive] processor
// also reads back and applies events another client took from its
// durable (Stats.Recovered).
//
// Poison events (see [Poison]) and events that fail [Config.MaxDeliver]
// times are copied to a dead-letter stream, with headers naming the
// original ([HeaderStream] and the others), and terminated;
// [ListDeadLetters], [GetDeadLetter] and [Replay] read them as
// [DeadLetter] values and republish them. [WithHistory] and
// [Projection.SetHistory] keep each order's history index, from which
// [Projection.History] and [Projection.AsOf] read an order's events, and
// its state at any point, back from the stream. [Lag] and
// [Processor.Progress] tell how far behind a consumer is.
package processor
