// Package processor folds order events into a projection. A [Processor], made by [New] from a
// [Config], runs a [Handler] over a durable JetStream pull consumer: delivery is at least once, a
// processor never handles two events of one order at once, a failed event is retried with backoff,
// and Run drains what it holds before it returns; [Stats] counts what it did. The built-in handler,
// [Projection], keeps each order's state ([Order]) in a KV bucket, one key per order written by
// compare-and-set.
//
// Each event's effect happens once (docs/processor.md, "Exactly-once effect"): a handler is
// idempotent on [Event.Sequence]; with [Config.Sync], a batch is acked only once what its handlers
// wrote is durable; and an event is never both applied and a dead letter (see [Withholder]); a
// [Config.Exclusive] processor also applies the events another client took from its durable. Poison
// events and events that fail [Config.MaxDeliver] times are copied to a dead-letter stream
// ([DeadLetter], [Replay]). [WithHistory] and [Projection.SetHistory] keep each order's history
// index, from which [Projection.History] and [Projection.AsOf] read it back. [Lag] and
// [Processor.Progress] tell how far behind a consumer is.
package processor
