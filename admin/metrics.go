package admin

import (
	"cmp"
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orderstore/orderstore/status"
)

// collector reads the state at scrape time: no background polling, no stale gauges.
type collector struct{ s *Server }

// descs are every metric's description, in the order desc made them.
var descs []*prometheus.Desc

func desc(name, help string, labels ...string) *prometheus.Desc {
	d := prometheus.NewDesc("orderstore_"+name, help, labels, nil)
	descs = append(descs, d)
	return d
}

var (
	descUp             = desc("up", "1 once the broker is up and orderstore's objects are declared; 0 while starting.")
	descReady          = desc("ready", "1 when /readyz reports ready.")
	descAckDurable     = desc("ack_durable", "1 when every publish ack means the event survives power loss (durability \"group-commit\" or \"always\").")
	descEncrypted      = desc("store_encrypted", "1 when the store is encrypted at rest (jetstream.encryption_key_file), with its cipher; 0 with cipher \"none\".", "cipher")
	descSyncAlways     = desc("sync_always", "1 when nats fsyncs every event before its publish ack (durability \"always\"); 0 with group commit, where one sync covers every ack waiting.")
	descBuild          = desc("build_info", "Build information; always 1.", "version", "commit", "go_version", "nats_server_version")
	descStreamMsgs     = desc("stream_messages", "Events stored in the stream.", "stream")
	descStreamBytes    = desc("stream_bytes", "Bytes stored in the stream.", "stream")
	descStreamFirst    = desc("stream_first_sequence", "First sequence in the stream.", "stream")
	descStreamLast     = desc("stream_last_sequence", "Last sequence in the stream.", "stream")
	descStreamAge      = desc("stream_oldest_message_age_seconds", "Age of the oldest stored event.", "stream")
	descMaxBytes       = desc("stream_max_bytes", "Configured stream.max_bytes; -1 unlimited.", "stream")
	descMaxMsgs        = desc("stream_max_messages", "Configured stream.max_msgs; -1 unlimited.", "stream")
	descMaxAge         = desc("stream_max_age_seconds", "Configured stream.max_age; 0 forever.", "stream")
	descPending        = desc("consumer_pending_messages", "Events not yet delivered to the processor.", "consumer")
	descAckPending     = desc("consumer_ack_pending_messages", "Events delivered to the processor and not yet acked.", "consumer")
	descRedelivered    = desc("consumer_redelivered_messages", "Unacked events delivered more than once.", "consumer")
	descAckFloor       = desc("consumer_ack_floor_sequence", "Every event at or below this sequence is processed.", "consumer")
	descBehind         = desc("consumer_seconds_behind", "Age of the oldest unprocessed event; 0 when caught up.", "consumer")
	descEvents         = desc("processor_events_total", "Events handled by the processor, by result.", "result")
	descLastApplied    = desc("processor_last_applied_sequence", "Highest stream sequence the processor applied.")
	descProcRunning    = desc("processor_running", "1 while the processor consumes.")
	descRemoved        = desc("processor_events_removed_unprocessed_total", "Events the stream's retention limits removed before the processor was delivered them.")
	descRecovered      = desc("processor_events_recovered_total", "Events another client took from the processor's durable, which the processor read back from the stream and applied.")
	descLostAtEdge     = desc("hub_edge_lost_events_total", "Events the hub had copied from an edge that the edge lost in a crash before they were durable (never acknowledged there); moved to the dead-letter stream.", "edge")
	descEdgeRegress    = desc("hub_edge_regressions_total", "Times an edge's sequence went backwards under events the hub had copied (each repaired).", "edge")
	descEdgeReachable  = desc("hub_edge_reachable", "1 when the edge's JetStream answered the hub through the leaf link at the last check (every second), else 0.", "edge")
	descEdgeBehind     = desc("hub_edge_behind_events", "Events the edge holds that the hub's aggregate has not sourced yet (0 while the edge is unreachable).", "edge")
	descEdgeBehindSecs = desc("hub_edge_behind_seconds", "Seconds the hub's source of the edge has been behind without advancing (over 30: stalled); 0 when in step.", "edge")
	descIngestRefused  = desc("guard_refused_total", "What orderstore answered with an error instead of passing it on (events refused at admission for their subject, size or origin; publishes answered 429 after 2 s in admission's line; requests on orderstore's own consumer), by reason.", "reason")
	descHeldBack       = desc("ingest_held_back_total", "Publishes whose connection waited in admission's line because the stream's inbound queue was deep (producers faster than the disk).")
	descAckErrors      = desc("processor_settle_errors_total", "Acks, naks and terms that could not be sent (the event is redelivered).")
	descRecovery       = desc("recovery_notes", "What start-up found and did about a damaged store (see /v1/status recovery); 0 after a clean start.")
	descDLQ            = desc("dead_letter_messages", "Events in the dead-letter stream.", "stream")
	descDLQBytes       = desc("dead_letter_bytes", "Bytes the dead-letter stream holds.", "stream")
	descDLQMax         = desc("dead_letter_max_bytes", "processor.dead_letter_max_bytes (-1: unlimited): beyond it the oldest dead letters are discarded.", "stream")
	descFree           = desc("store_free_bytes", "Free disk under store_dir for the service user.")
	descJSUsed         = desc("jetstream_store_bytes", "Bytes JetStream stores on disk, all streams together.")
	descJSMax          = desc("jetstream_max_store_bytes", "jetstream.max_file_store: what JetStream may store on disk.")
	descCheck          = desc("ready_check", "1 when the readiness check passes, 0 when it fails (its reason is in /readyz).", "check")
	descSyncSeconds    = desc("group_commit_sync_seconds", "Time of one group-commit round's sync, of any stream or bucket (durability \"group-commit\").")
	descBatchEvents    = desc("group_commit_batch_events", "Publishes (events and orderstore's own writes) acknowledged after one group-commit round's sync.")
	descGCAcked        = desc("group_commit_acked_events_total", "Producers' events acknowledged after a group-commit sync.")
	descGCWaiting      = desc("group_commit_acks_waiting", "Publishes waiting now in admission's line (their connection held while the stream's inbound queue is deep).")
	descGCSyncErrors   = desc("group_commit_sync_errors_total", "Failed group-commit syncs (the first one stops orderstore).")
	descGCInFlight     = desc("group_commit_sync_inflight_seconds", "How long the group-commit sync in flight the longest has taken so far (0: none); over 30 s /readyz fails.")
	descRejected       = desc("validation_rejected_total", "Events refused at ingest by schema validation ([validation]), nothing stored, by event type (\"other\" for types without a schema) and reason (the schema keyword that failed, or invalid_json, unknown_type, func).", "type", "reason")
	descRebuildRunning = desc("projection_rebuild_running", "1 while a projection rebuild is under way (folding or taking over), else 0.")
	descRebuildDone    = desc("projection_rebuild_events_done", "Events (by stream sequence) the rebuild under way or the last one folded into its shadow.")
	descRebuildTotal   = desc("projection_rebuild_events_total", "Events (by stream sequence) the rebuild under way or the last one has to fold, up to the stream's head.")
	descRebuildRate    = desc("projection_rebuild_rate", "Events per second the rebuild under way folds (over the last seconds).")
	descRebuildFailed  = desc("projection_rebuild_failed", "1 when the last projection rebuild failed or its takeover is left to the next start, else 0.")
	descOrders         = desc("orders", "Orders in the projection by status (the 32 largest statuses; the rest summed as status \"other\"), from the order index; absent while it loads.", "status")
	descOrdersStale    = desc("orders_stale", "Orders in a status of processor.stale_after with no event for longer than it says, by status.", "status")
	descReloadOK       = desc("config_last_reload_successful", "1 when the last reload of [validation] (SIGHUP, SetValidation) succeeded; 0 when it failed and the schemas before it stay in force (/readyz says why).")
	descReloadAt       = desc("config_last_reload_success_timestamp_seconds", "Unix time of the last successful reload of [validation], or of the start.")
	descIndexLag       = desc("order_index_lag_writes", "Writes of the projection bucket the order index has not read yet (the bucket's last sequence minus the index's): near 0; one that does not shrink means listings, counts and stale counts by status are stale.")
	descScrapeErrors   = desc("scrape_errors", "Parts of the state that could not be read during this scrape.")
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range descs {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	b11 := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	bi := s.cfg.Build
	gauge(descBuild, 1, bi.Version, bi.Commit, bi.GoVersion, bi.NATSServer)
	gauge(descEncrypted, b11(s.cfg.Cipher != ""), cmp.Or(s.cfg.Cipher, "none"))
	gauge(descSyncAlways, b11(s.cfg.SyncPolicy == "always"))
	gauge(descAckDurable, b11(s.cfg.SyncPolicy == "always" || s.cfg.SyncPolicy == "group-commit"))
	gauge(descMaxBytes, float64(limit(s.cfg.MaxBytes)), s.cfg.Stream)
	gauge(descMaxMsgs, float64(limit(s.cfg.MaxMsgs)), s.cfg.Stream)
	gauge(descMaxAge, s.cfg.MaxAge.Seconds(), s.cfg.Stream)
	b := s.backend.Load()
	gauge(descUp, b11(b != nil))
	if b == nil {
		gauge(descReady, 0)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st := s.collectStatus(ctx, b)
	gauge(descReady, b11(st.Status == "ready"))
	for _, c := range st.Checks {
		gauge(descCheck, b11(c.OK), c.Name)
	}
	if st.Store.JetStreamMaxBytes > 0 {
		gauge(descJSUsed, float64(st.Store.JetStreamBytes))
		gauge(descJSMax, float64(st.Store.JetStreamMaxBytes))
	}
	gauge(descStreamMsgs, float64(st.Stream.Messages), st.Stream.Name)
	gauge(descStreamBytes, float64(st.Stream.Bytes), st.Stream.Name)
	gauge(descStreamFirst, float64(st.Stream.FirstSeq), st.Stream.Name)
	gauge(descStreamLast, float64(st.Stream.LastSeq), st.Stream.Name)
	gauge(descStreamAge, st.Stream.OldestAgeSeconds, st.Stream.Name)
	if l := st.Consumer; l != nil {
		gauge(descPending, float64(l.Pending), l.Name)
		gauge(descAckPending, float64(l.AckPending), l.Name)
		gauge(descRedelivered, float64(l.Redelivered), l.Name)
		gauge(descAckFloor, float64(l.AckFloor), l.Name)
		gauge(descBehind, l.SecondsBehind, l.Name)
	}
	if p := st.Processor; p != nil {
		counter(descEvents, p.Processed, "processed")
		counter(descEvents, p.Failed, "failed")
		counter(descEvents, p.DeadLettered, "dead_lettered")
		counter(descEvents, p.Duplicates, "duplicate")
		gauge(descLastApplied, float64(p.LastAppliedSeq))
		gauge(descProcRunning, b11(p.Running))
		counter(descRemoved, p.RemovedUnprocessed)
		counter(descRecovered, p.Recovered)
		counter(descAckErrors, p.AckErrors)
	}
	gauge(descDLQ, float64(st.DeadLetters.Messages), st.DeadLetters.Stream)
	gauge(descDLQBytes, float64(st.DeadLetters.Bytes), st.DeadLetters.Stream)
	gauge(descDLQMax, float64(limit(st.DeadLetters.MaxBytes)), st.DeadLetters.Stream)
	gauge(descRecovery, float64(len(st.Recovery)))
	if s.cfg.FreeBytes != nil {
		gauge(descFree, float64(st.Store.FreeBytes))
	}
	gauge(descScrapeErrors, float64(len(st.Errors)))
	if g := st.Guard; g != nil {
		counter(descIngestRefused, g.Refused, "refused")
		counter(descIngestRefused, g.Overloaded, "overloaded")
		counter(descIngestRefused, g.ForeignConsumerRequests, "foreign_consumer_request")
		counter(descHeldBack, g.HeldBack)
	}
	if v := st.Validation; v != nil {
		for _, c := range v.Rejected {
			counter(descRejected, c.Events, c.Type, c.Reason)
		}
	}
	if r := st.ConfigReload; r != nil {
		gauge(descReloadOK, b11(r.Successful))
		gauge(descReloadAt, float64(r.LastSuccess.UnixNano())/1e9)
	}
	if rb := st.Rebuild; rb != nil {
		gauge(descRebuildRunning, b11(rb.Running()))
		gauge(descRebuildFailed, b11(rb.State == status.RebuildFailed || rb.Error != ""))
		gauge(descRebuildDone, float64(rb.Done))
		gauge(descRebuildTotal, float64(rb.Total))
		gauge(descRebuildRate, rb.Rate)
	}
	if t := st.Topology; t != nil {
		for _, src := range t.Sources {
			counter(descLostAtEdge, src.LostEvents, src.Edge)
			counter(descEdgeRegress, src.Regressions, src.Edge)
			gauge(descEdgeReachable, b11(src.Reachable), src.Edge)
			gauge(descEdgeBehind, float64(src.Behind), src.Edge)
			gauge(descEdgeBehindSecs, src.BehindSeconds, src.Edge)
		}
	}
	if o := st.Orders; o != nil && !o.Loading {
		other := o.Other
		for _, c := range o.Statuses {
			if c.Status == "other" && o.OtherStatuses > 0 {
				other += c.Orders // a status named "other" joins the rest: one series
				continue
			}
			gauge(descOrders, float64(c.Orders), c.Status)
		}
		if o.OtherStatuses > 0 {
			gauge(descOrders, float64(other), "other")
		}
		for s, n := range o.Stale {
			gauge(descOrdersStale, float64(n), s)
		}
		gauge(descIndexLag, float64(o.IndexLagWrites))
	}
	if in := st.Ingest; in != nil {
		ch <- prometheus.MustNewConstHistogram(descSyncSeconds, in.SyncSeconds.Count, in.SyncSeconds.Sum, in.SyncSeconds.Buckets)
		ch <- prometheus.MustNewConstHistogram(descBatchEvents, in.BatchEvents.Count, in.BatchEvents.Sum, in.BatchEvents.Buckets)
		counter(descGCAcked, in.Acked)
		gauge(descGCWaiting, float64(in.Waiting))
		counter(descGCSyncErrors, in.SyncErrors)
		gauge(descGCInFlight, in.SyncInFlightSeconds)
	}
}

func limit(n int64) int64 { return cmp.Or(max(n, 0), -1) }
