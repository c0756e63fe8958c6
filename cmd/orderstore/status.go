package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/orderstore/orderstore/internal/config"
	"github.com/orderstore/orderstore/status"
)

func statusCmd(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("status", stderr)
	client := clientFlags(fs)
	asJSON := fs.Bool("json", false, "print the raw JSON of /v1/status")
	if !parseFlags(fs, args) {
		return exitUsage
	}
	c, err := client()
	if err != nil {
		return fail(stderr, exitUsage, err)
	}
	var st status.Status
	if err := c.do("GET", "/v1/status", &st); err != nil {
		return fail(stderr, exitFailure, err)
	}
	if *asJSON {
		printJSON(stdout, st)
	} else {
		printStatus(stdout, st)
	}
	return exitIf(st.Status != "ready")
}

func printStatus(w io.Writer, st status.Status) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "orderstore %s\t%s (nats-server %s)\n", st.Status, versionText(st.Build), st.Build.NATSServer)
	fmt.Fprintf(tw, "durability\t%s: %s\n", st.Durability["mode"], st.Durability["description"])
	s := st.Stream
	fmt.Fprintf(tw, "stream %s\t%d events, seq %d..%d\n", s.Name, s.Messages, s.FirstSeq, s.LastSeq)
	fmt.Fprintf(tw, "  size\t%s of max_bytes %s (%.1f%%)\n", config.ByteSize(s.Bytes), config.ByteSize(s.MaxBytes), s.BytesPercent)
	age := func(secs float64) string { return config.Duration(time.Duration(secs) * time.Second).String() }
	maxAge := either(s.MaxAgeSeconds > 0, age(s.MaxAgeSeconds), "forever")
	oldest := either(s.Messages > 0, age(s.OldestAgeSeconds)+" old", "none (the stream is empty)")
	fmt.Fprintf(tw, "  oldest event\t%s, max_age %s\n", oldest, maxAge)
	if c := st.Consumer; c != nil {
		// On a hub the consumer reads the aggregate stream, not the stream above.
		on := either(c.Stream != "" && c.Stream != s.Name, " on "+c.Stream, "")
		fmt.Fprintf(tw, "consumer %s%s\t%d unprocessed (%d pending, %d awaiting ack), %.1fs behind, %d redelivered, ack floor %d\n",
			c.Name, on, c.Pending+uint64(c.AckPending), c.Pending, c.AckPending, c.SecondsBehind, c.Redelivered, c.AckFloor)
	}
	if p := st.Processor; p != nil {
		fmt.Fprintf(tw, "processor\t%s: %d processed, %d retrying, %d dead-lettered (%d poison), %d duplicates skipped\n",
			either(p.Running, "running", "stopped"), p.Processed, p.Failed, p.DeadLettered, p.Poison, p.Duplicates)
		if p.RemovedUnprocessed > 0 {
			fmt.Fprintf(tw, "  lost to retention\t%d events removed by the stream's limits before the processor saw them (not in the projection)\n", p.RemovedUnprocessed)
		}
		if p.Recovered > 0 {
			fmt.Fprintf(tw, "  recovered\t%d events another client took from the processor's durable, read back from the stream and applied\n", p.Recovered)
		}
	} else {
		fmt.Fprintf(tw, "processor\tdisabled\n")
	}
	fmt.Fprintf(tw, "dead letters\t%d in %s, %s of dead_letter_max_bytes %s\n", st.DeadLetters.Messages, st.DeadLetters.Stream,
		config.ByteSize(st.DeadLetters.Bytes), config.ByteSize(st.DeadLetters.MaxBytes))
	fmt.Fprintf(tw, "projection\t%d orders in %s, %s of projection_max_bytes %s\n", st.Projection.Orders, st.Projection.Bucket,
		config.ByteSize(st.Projection.Bytes), config.ByteSize(st.Projection.MaxBytes))
	if r := st.Rebuild; r.Running() {
		fmt.Fprintf(tw, "  rebuild\t%s (orderstore projection status)\n", rebuildBrief(r))
	}
	if o := st.Orders; o != nil {
		fmt.Fprintf(tw, "  by status\t%s\n", ordersBrief(o))
	}
	fmt.Fprintf(tw, "store\t%s, %s free; JetStream stores %s of max_file_store %s\n", st.Store.Dir, config.ByteSize(st.Store.FreeBytes),
		config.ByteSize(st.Store.JetStreamBytes), config.ByteSize(st.Store.JetStreamMaxBytes))
	fmt.Fprintf(tw, "  encryption\t%s\n", either(st.Store.Encrypted, "at rest, "+st.Store.Cipher,
		"none (jetstream.encryption_key_file encrypts a new store)"))
	printTopology(tw, st.Topology)
	printValidation(tw, st.Validation)
	if g := st.Guard; g != nil && g.Refused+g.Overloaded+g.ForeignConsumerRequests > 0 {
		fmt.Fprintf(tw, "refused\t%d events for their subject, size or origin (400, 403), %d after 2 s in admission's line (429), %d requests on orderstore's own consumer\n",
			g.Refused, g.Overloaded, g.ForeignConsumerRequests)
	}
	if g := st.Guard; g != nil && g.HeldBack > 0 {
		fmt.Fprintf(tw, "held back\t%d publishes waited in line: the stream's queue was deep (producers faster than the disk)\n", g.HeldBack)
	}
	for _, c := range st.Checks {
		if !c.OK {
			fmt.Fprintf(tw, "not ready\t%s: %s\n", c.Name, c.Reason)
		} else if w, ok := strings.CutPrefix(c.Reason, "warning: "); ok && c.Name != "recovery" { // recovery: its notes below
			fmt.Fprintf(tw, "warning\t%s: %s\n", c.Name, w)
		}
	}
	for _, r := range st.Recovery {
		fmt.Fprintf(tw, "recovery\t%s\n", r)
	}
	for _, e := range st.Errors {
		fmt.Fprintf(tw, "error\t%s\n", e)
	}
	tw.Flush()
}

// statusTop is how many schemas and refusal counts the validation line
// names; the JSON (-json) and /metrics have them all.
const statusTop = 5

// printValidation prints schema validation's settings and what it
// refused, the largest counts first; nothing when it checks nothing.
func printValidation(tw io.Writer, v *status.ValidationStats) {
	if v == nil {
		return
	}
	types := slices.Sorted(maps.Keys(v.Schemas))
	var b strings.Builder
	if len(types) == 0 {
		b.WriteString("no schemas")
	} else {
		fmt.Fprintf(&b, "%d %s (%s", len(types), either(len(types) == 1, "schema", "schemas"), strings.Join(types[:min(len(types), statusTop)], ", "))
		if len(types) > statusTop {
			fmt.Fprintf(&b, ", %d more", len(types)-statusTop)
		}
		b.WriteString(")")
	}
	if slow := slices.Sorted(maps.Keys(v.Slow)); len(slow) > 0 {
		fmt.Fprintf(&b, ", %d checked by the library alone (%s", len(slow), strings.Join(slow[:min(len(slow), statusTop)], ", "))
		b.WriteString(either(len(slow) > statusTop, fmt.Sprintf(", %d more)", len(slow)-statusTop), ")"))
	}
	b.WriteString(either(v.UnknownTypes == "reject", ", unknown types rejected", ", unknown types accepted"))
	b.WriteString(either(v.Func, ", plus the program's own check", ""))
	if v.RejectedTotal == 0 {
		b.WriteString("; nothing refused")
	} else {
		fmt.Fprintf(&b, "; %d events refused: ", v.RejectedTotal)
		counts := slices.Clone(v.Rejected)
		slices.SortStableFunc(counts, func(x, y status.ValidationCount) int {
			return cmp.Or(cmp.Compare(y.Events, x.Events), cmp.Compare(x.Type, y.Type), cmp.Compare(x.Reason, y.Reason))
		})
		for i, c := range counts[:min(len(counts), statusTop)] {
			fmt.Fprintf(&b, "%s%s/%s %d", either(i > 0, ", ", ""), c.Type, c.Reason, c.Events)
		}
		if rest := counts[min(len(counts), statusTop):]; len(rest) > 0 {
			var n uint64
			for _, c := range rest {
				n += c.Events
			}
			fmt.Fprintf(&b, ", and %d more in %d other type/reason pairs", n, len(rest))
		}
	}
	fmt.Fprintf(tw, "validation\t%s\n", b.String())
}

// printTopology prints the node's cluster, its leaf links and a hub's sources.
func printTopology(tw io.Writer, t *status.Topology) {
	if t == nil {
		return
	}
	fmt.Fprintf(tw, "node\t%s%s\n", t.Node, either(t.Domain != "", " (domain "+t.Domain+")", ""))
	if c := t.Cluster; c != nil {
		fmt.Fprintf(tw, "cluster %s\t%s; meta leader %q; %d of %d other nodes reached; peers %v\n",
			c.Name, either(c.Quorum, "quorum", "NO QUORUM"), c.MetaLeader, c.RoutesUp, c.OtherNodes, c.Peers)
		for _, g := range []*status.ReplicaGroup{c.Stream, c.Consumer} {
			if g == nil {
				continue
			}
			fmt.Fprintf(tw, "  %s\tleader %q", g.Name, g.Leader)
			for _, r := range g.Replicas {
				state := either(r.Offline, "OFFLINE", either(r.Current, "current", fmt.Sprintf("behind by %d", r.Lag)))
				fmt.Fprintf(tw, "; %s %s (seen %.1fs ago)", r.Name, state, max(r.ActiveSeconds, 0))
			}
			fmt.Fprintln(tw)
		}
	}
	for _, l := range t.Leafnodes {
		fmt.Fprintf(tw, "leaf link\t%s %s%s\n", l.Remote, either(l.Connected, "connected", "DOWN (retrying)"), either(l.RTT != "", ", rtt "+l.RTT, ""))
	}
	for _, s := range t.Sources {
		state := "in step"
		switch {
		case s.Regressed:
			state = "REGRESSED: the edge's last sequence is below what the hub holds from it (it lost events in a crash); repairing"
		case s.Stalled:
			state = fmt.Sprintf("STALLED: %d events behind for %.0fs although the edge is reachable", s.Behind, s.BehindSeconds)
		case !s.Reachable:
			state = "edge unreachable (its events wait at the edge)"
		case s.Behind > 0:
			state = fmt.Sprintf("%d events behind (%.0fs)", s.Behind, s.BehindSeconds)
		}
		fmt.Fprintf(tw, "source %s\t%s; sourced up to edge seq %d of %d; nats lag %d, active %.1fs ago\n",
			s.Edge, state, s.SourcedSeq, s.EdgeLastSeq, s.NATSLag, max(s.ActiveSeconds, 0))
		if s.LostEvents > 0 {
			fmt.Fprintf(tw, "  lost at the edge\t%d events in %d crashes, moved to the dead-letter stream; last: %s\n", s.LostEvents, s.Regressions, s.LastRegression)
		}
		if s.Error != "" {
			fmt.Fprintf(tw, "  error\t%s\n", s.Error)
		}
	}
}

// versionText is a build's version as people read it: a release's tag, or
// "dev (commit 1a2b3c4d5e6f)" for a build from a checkout.
func versionText(b status.BuildInfo) string {
	if b.Version != "dev" || b.Commit == "" || b.Commit == "unknown" {
		return b.Version
	}
	return "dev (commit " + b.Commit[:min(12, len(b.Commit))] + ")"
}

// ordersBrief is the order index's counts on one line: the five largest
// statuses, how many more, and the stale orders.
func ordersBrief(o *status.OrdersStatus) string {
	if o.Loading {
		return fmt.Sprintf("the order index is loading (%d orders so far)", o.Total)
	}
	var parts []string
	for _, c := range o.Statuses[:min(len(o.Statuses), 5)] {
		p := fmt.Sprintf("%s %d", clip(c.Status, 40), c.Orders)
		if c.Stale != nil && *c.Stale > 0 {
			p += fmt.Sprintf(" (%d stale)", *c.Stale)
		}
		parts = append(parts, p)
	}
	if more := max(len(o.Statuses)-5, 0) + o.OtherStatuses; more > 0 {
		parts = append(parts, fmt.Sprintf("%d more statuses", more))
	}
	if len(parts) == 0 {
		return "no orders"
	}
	line := strings.Join(parts, ", ")
	stale := 0
	for _, n := range o.Stale {
		stale += n
	}
	if stale > 0 {
		line += fmt.Sprintf("; %d stale in all (orderstore orders -stale)", stale)
	}
	return line
}
