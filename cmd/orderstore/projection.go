package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/orderstore/orderstore/status"
)

const projectionUsage = `usage: orderstore projection rebuild [-from-seq N | -from-time T] [-replace-partial] [-detach] [-json]
       orderstore projection rebuild -cancel [-detach] [-json]
       orderstore projection status [-json]
  rebuild            rebuild the projection from the stream beside the live one (which serves
                     reads meanwhile) and follow it until the rebuilt projection takes over
  -from-seq N        fold from stream sequence N instead of the stream's first event
  -from-time T       fold from the first event at or after T, an RFC 3339 time (2026-12-01T00:00:00Z)
  -replace-partial   also replace the orders with events before that (default: kept as they are)
  -detach            start (or cancel) it and return; 'orderstore projection status' shows it
  -cancel            cancel the rebuild under way; the live projection stays as it was
  -json              print the rebuild's status as JSON
  status             the rebuild under way, or the last one
  Ctrl-C stops following a rebuild, not the rebuild. Exit codes: 0 done (status: reported),
  1 failed, canceled or refused (status: the last one failed), 2 usage, 130 Ctrl-C while following.
  all take -admin URL, -token T, -config FILE to reach the admin listener
`

const rebuildPath = "/v1/projection/rebuild"

// Following a rebuild: how often it is asked, how often a plain progress line is printed (stderr
// not a terminal), and how long the admin API may be unreachable (an appliance restarting: the
// rebuild goes on after it) before the command gives up.
const (
	rebuildPoll        = 500 * time.Millisecond
	rebuildPlainEvery  = 2 * time.Second
	rebuildUnreachable = 30 * time.Second
)

// projectionCmd starts, follows, cancels and reports a projection rebuild
// through a running instance's admin API.
func projectionCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "rebuild" && args[0] != "status") {
		return usageErr(stderr, "%s", projectionUsage)
	}
	sub := args[0]
	fs := newFlagSet("projection "+sub, stderr)
	fs.Usage = func() { fmt.Fprint(stderr, projectionUsage) }
	client := clientFlags(fs)
	asJSON := fs.Bool("json", false, "print the rebuild's status as JSON")
	var (
		fromSeq                        *uint64
		fromTime                       *string
		replacePartial, detach, cancel *bool
	)
	if sub == "rebuild" {
		fromSeq = fs.Uint64("from-seq", 0, "fold from this stream sequence")
		fromTime = fs.String("from-time", "", "fold from the first event at or after this RFC 3339 time")
		replacePartial = fs.Bool("replace-partial", false, "also replace orders with events before -from-seq/-from-time")
		detach = fs.Bool("detach", false, "start (or cancel) and return without following")
		cancel = fs.Bool("cancel", false, "cancel the rebuild under way")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		return usageErr(stderr, "orderstore projection %s: unexpected argument %q\n\n%s", sub, fs.Arg(0), projectionUsage)
	}
	var req status.RebuildRequest
	if sub == "rebuild" {
		if *cancel && (*fromSeq > 0 || *fromTime != "" || *replacePartial) {
			return usageErr(stderr, "orderstore projection rebuild: -cancel takes no -from-seq, -from-time or -replace-partial\n")
		}
		if *fromSeq > 0 && *fromTime != "" {
			return usageErr(stderr, "orderstore projection rebuild: -from-seq and -from-time do not go together: give one place to fold from\n")
		}
		if *fromTime != "" {
			t, err := time.Parse(time.RFC3339Nano, *fromTime)
			if err != nil {
				return usageErr(stderr, "orderstore projection rebuild: -from-time %q is not an RFC 3339 time (2026-12-01T00:00:00Z)\n", *fromTime)
			}
			req.FromTime = t
		}
		req.FromSeq, req.ReplacePartial = *fromSeq, *replacePartial
	}
	c, err := client()
	if err != nil {
		return fail(stderr, exitUsage, err)
	}
	r := &rebuildCmd{c: c, stdout: stdout, stderr: stderr, asJSON: *asJSON, again: connArgs(fs)}
	if sub == "status" {
		return r.status()
	}
	// Ctrl-C while following stops the following, not the rebuild; the signal is taken before the
	// request so that none is lost to the default action (which would leave the user not knowing).
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *cancel {
		return r.cancel(ctx, *detach)
	}
	return r.start(ctx, req, *detach)
}

// rebuildCmd is one run of the projection command.
type rebuildCmd struct {
	c              *adminClient
	stdout, stderr io.Writer
	asJSON         bool
	again          string // the flags that reach this instance, for the commands it suggests
}

// status prints the rebuild under way or the last one.
func (r *rebuildCmd) status() int {
	var st status.Rebuild
	if err := r.c.do(http.MethodGet, rebuildPath, &st); err != nil {
		if statusOf(err) == http.StatusNotFound {
			if r.asJSON {
				fmt.Fprintln(r.stdout, "null")
			}
			fmt.Fprintln(either(r.asJSON, r.stderr, r.stdout), "no projection rebuild has run on this store")
			return exitOK
		}
		return fail(r.stderr, exitFailure, err)
	}
	r.print(&st)
	return exitIf(st.State == status.RebuildFailed)
}

// start asks for a rebuild and, unless detach, follows it to its end (ctx's end stops the
// following, not the request).
func (r *rebuildCmd) start(ctx context.Context, req status.RebuildRequest, detach bool) int {
	var st status.Rebuild
	if err := r.c.send(context.WithoutCancel(ctx), http.MethodPost, rebuildPath, req, &st); err != nil {
		if statusOf(err) == http.StatusConflict {
			err = withHint(err, fmt.Sprintf("watch it with 'orderstore projection status%s', or cancel it with 'orderstore projection rebuild -cancel%s'", r.again, r.again))
		}
		return fail(r.stderr, exitFailure, err)
	}
	if detach {
		if r.asJSON {
			r.print(&st)
		} else {
			fmt.Fprintf(r.stdout, "projection rebuild %s started in the background\n", st.ID)
		}
		fmt.Fprintf(r.stderr, "watch it: orderstore projection status%s\ncancel it: orderstore projection rebuild -cancel%s\n", r.again, r.again)
		return exitOK
	}
	fmt.Fprintf(r.stderr, "projection rebuild %s started (%s); the live projection serves reads until the rebuilt one takes over; Ctrl-C stops following, not the rebuild\n", st.ID, st.Reason)
	p := &rebuildProgress{w: r.stderr, tty: isTerminal(r.stderr) && os.Getenv("TERM") != "dumb", width: 24}
	return r.follow(ctx, &st, p, status.RebuildDone)
}

// cancel cancels the rebuild under way and, unless detach, waits for it to stop (as start does).
func (r *rebuildCmd) cancel(ctx context.Context, detach bool) int {
	var st status.Rebuild
	if err := r.c.send(context.WithoutCancel(ctx), http.MethodDelete, rebuildPath, nil, &st); err != nil {
		if statusOf(err) == http.StatusConflict {
			err = withHint(err, fmt.Sprintf("'orderstore projection status%s' shows the rebuild under way or the last one", r.again))
		}
		return fail(r.stderr, exitFailure, err)
	}
	fmt.Fprintf(r.stderr, "cancel requested: projection rebuild %s stops and drops its shadow; the live projection stays as it was\n", st.ID)
	if detach {
		if r.asJSON {
			r.print(&st)
		}
		fmt.Fprintf(r.stderr, "watch it: orderstore projection status%s\n", r.again)
		return exitOK
	}
	return r.follow(ctx, &st, &rebuildProgress{w: io.Discard}, status.RebuildCanceled)
}

// follow asks for the rebuild every rebuildPoll, showing its progress on p (on io.Discard: none),
// until it ends, and prints its end: exit 0 when it ends in the state want. A signal (ctx done)
// stops the following and says how to go on.
func (r *rebuildCmd) follow(ctx context.Context, st *status.Rebuild, p *rebuildProgress, want string) int {
	cur := st
	var failingSince time.Time
	t := time.NewTicker(rebuildPoll)
	defer t.Stop()
	for cur.Running() {
		p.show(cur)
		select {
		case <-ctx.Done():
			p.clear()
			fmt.Fprintf(r.stderr, "orderstore: stopped following: the projection rebuild %s goes on in the background (%s)\n", st.ID, rebuildBrief(cur))
			fmt.Fprintf(r.stderr, "  watch it:  orderstore projection status%s\n  cancel it: orderstore projection rebuild -cancel%s\n", r.again, r.again)
			if sig, _ := signalName(ctx); sig == syscall.SIGTERM.String() {
				return 128 + int(syscall.SIGTERM) // as a shell reports it
			}
			return exitInterrupted
		case <-t.C:
		}
		var next status.Rebuild
		err := r.c.send(ctx, http.MethodGet, rebuildPath, nil, &next)
		if ctx.Err() != nil {
			continue // the signal, above
		}
		if err != nil {
			// An appliance restarting answers 503 or not at all for a while: the rebuild goes on
			// after it. Anything else is an answer.
			code := statusOf(err)
			if _, unreachable := errors.AsType[*url.Error](err); !unreachable && code != http.StatusServiceUnavailable && code != http.StatusBadGateway && code != http.StatusGatewayTimeout {
				p.clear()
				return fail(r.stderr, exitFailure, err)
			}
			if failingSince.IsZero() {
				failingSince = time.Now()
				p.clear()
				fmt.Fprintf(p.w, "projection rebuild: the admin API does not answer (%v); retrying for %s\n", err, rebuildUnreachable)
			}
			if time.Since(failingSince) > rebuildUnreachable {
				p.clear()
				return fail(r.stderr, exitFailure, withHint(fmt.Errorf("following projection rebuild %s: %w", st.ID, err),
					fmt.Sprintf("the rebuild may go on: 'orderstore projection status%s' shows it once the admin API answers", r.again)))
			}
			continue
		}
		failingSince = time.Time{}
		if next.ID != st.ID {
			p.clear()
			return fail(r.stderr, exitFailure, withHint(fmt.Errorf("projection rebuild %s is no longer the store's latest: %s is (%s)", st.ID, next.ID, next.State),
				fmt.Sprintf("'orderstore projection status%s' shows it", r.again)))
		}
		cur = &next
	}
	p.clear()
	r.print(cur)
	return exitIf(cur.State != want)
}

// print prints a rebuild's status: JSON, or lines.
func (r *rebuildCmd) print(st *status.Rebuild) {
	if r.asJSON {
		printJSON(r.stdout, st)
		return
	}
	printRebuild(r.stdout, st, time.Now())
}

// printRebuild prints a rebuild's state, progress and, once it ended, what it did.
func printRebuild(w io.Writer, st *status.Rebuild, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := st.State
	switch {
	case st.Running():
		head += ", for " + roundDuration(now.Sub(st.StartedAt))
	case st.EndedAt != nil:
		head += " in " + roundDuration(st.EndedAt.Sub(st.StartedAt))
	}
	head += either(st.Reason != "", " ("+st.Reason+")", "")
	fmt.Fprintf(tw, "projection rebuild %s: %s\n", st.ID, head) // no column: the id is long
	if st.Version != "" {
		fmt.Fprintf(tw, "version\t%s\n", st.Version)
	}
	folded := fmt.Sprintf("%d", st.Done)
	if st.Running() && st.Total == 0 {
		folded += " so far (reading the stream and the dead letters)"
	} else if st.Running() || st.Done != st.Total {
		folded = fmt.Sprintf("%d of %d (%.1f%%)", st.Done, st.Total, percent(st.Done, st.Total))
	}
	if st.Done > 0 {
		folded += fmt.Sprintf(", seq %d..%d", st.FromSeq, st.Position)
	} else if st.FromSeq > 0 {
		folded += fmt.Sprintf(", from seq %d", st.FromSeq)
	}
	if st.Running() && st.Head > st.Position {
		folded += fmt.Sprintf(", stream head %d", st.Head)
	}
	if st.State == status.RebuildFolding && st.Rate > 0 {
		folded += fmt.Sprintf("; %.0f events/s, ETA %s", st.Rate, roundDuration(seconds(st.ETASeconds)))
	}
	fmt.Fprintf(tw, "events folded\t%s\n", folded)
	fmt.Fprintf(tw, "skipped\t%d poison, %d dead letters (the live projection holds neither)\n", st.Poison, st.DeadLettered)
	if st.State == status.RebuildTakingOver {
		fmt.Fprintf(tw, "taking over\t%s (the live processor is paused meanwhile)\n", either(st.ToCopy == 0, "folding the last events",
			fmt.Sprintf("%d of %d orders copied into the live projection", st.Copied, st.ToCopy)))
	}
	if st.State == status.RebuildDone {
		fmt.Fprintf(tw, "orders rebuilt\t%d (their rebuilt state replaced the live one)\n", st.Rebuilt)
		partial := fmt.Sprintf("%d (events %sno longer in the stream", st.Partial, either(st.FromSeq > 1, fmt.Sprintf("before seq %d or ", st.FromSeq), ""))
		partial += either(st.ReplacePartial, "; -replace-partial: none kept, each rebuilt from what the stream holds)",
			": kept as they were; -replace-partial replaces them)")
		fmt.Fprintf(tw, "partial, kept\t%s\n", partial)
		fmt.Fprintf(tw, "conflicts, kept\t%d (an event dead-lettered after the rebuild folded it: kept as they were)\n", st.Conflicts)
		fmt.Fprintf(tw, "untouched\t%d (no event in the folded range)\n", st.Untouched)
	}
	if st.State == status.RebuildCanceled || st.State == status.RebuildFailed {
		fmt.Fprintf(tw, "live projection\tas it was (the shadow is dropped)\n")
	}
	started := st.StartedAt.UTC().Format(time.RFC3339)
	if st.EndedAt != nil {
		started += ", ended " + st.EndedAt.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(tw, "started\t%s\n", started)
	if st.Error != "" {
		fmt.Fprintf(tw, "error\t%s\n", st.Error)
	}
	tw.Flush()
}

// rebuildBrief is a rebuild's state in a few words.
func rebuildBrief(st *status.Rebuild) string {
	if st.State == status.RebuildTakingOver && st.ToCopy > 0 {
		return fmt.Sprintf("taking over, %d of %d orders copied", st.Copied, st.ToCopy)
	}
	return fmt.Sprintf("%s, %d of %d events", st.State, st.Done, st.Total)
}

// rebuildProgress shows a followed rebuild's progress on stderr: one line redrawn in place on a
// terminal, plain lines every rebuildPlainEvery (and at each change of state) otherwise.
type rebuildProgress struct {
	w         io.Writer
	tty       bool
	width     int // the bar's
	drawn     bool
	lastPlain time.Time
	lastState string
}

// show draws st's progress.
func (p *rebuildProgress) show(st *status.Rebuild) {
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", p.line(st))
		p.drawn = true
		return
	}
	if st.State == p.lastState && time.Since(p.lastPlain) < rebuildPlainEvery {
		return
	}
	p.lastState, p.lastPlain = st.State, time.Now()
	fmt.Fprintf(p.w, "projection rebuild: %s\n", p.line(st))
}

// clear erases the drawn line (a terminal's).
func (p *rebuildProgress) clear() {
	if p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
		p.drawn = false
	}
}

// line is the progress line's text: a bar on a terminal.
func (p *rebuildProgress) line(st *status.Rebuild) string {
	var b strings.Builder
	b.WriteString(st.State)
	switch st.State {
	case status.RebuildTakingOver:
		if st.ToCopy == 0 {
			b.WriteString(": folding the last events (the live processor is paused)")
			break
		}
		fmt.Fprintf(&b, "%s %d/%d orders copied (the live processor is paused)",
			either(p.tty, " "+bar(st.Copied, st.ToCopy, p.width), ""), st.Copied, st.ToCopy)
	default:
		if st.Total == 0 {
			b.WriteString(": reading the stream and the dead letters")
			break
		}
		fmt.Fprintf(&b, "%s %5.1f%% %d/%d events", either(p.tty, " "+bar(st.Done, st.Total, p.width), ""),
			percent(st.Done, st.Total), st.Done, st.Total)
		if st.Rate > 0 {
			fmt.Fprintf(&b, ", %.0f events/s, ETA %s", st.Rate, roundDuration(seconds(st.ETASeconds)))
		}
	}
	if st.Error != "" {
		fmt.Fprintf(&b, " (%s)", st.Error)
	}
	return b.String()
}

// bar is [#####-----] filled done/total.
func bar(done, total uint64, width int) string {
	n := 0
	if total > 0 {
		n = int(min(done, total) * uint64(width) / total)
	}
	return "[" + strings.Repeat("#", n) + strings.Repeat("-", width-n) + "]"
}

// percent is done of total in percent, rounded down to a tenth: 100.0 only when done.
func percent(done, total uint64) float64 {
	if total == 0 {
		return 0
	}
	return math.Floor(1000*float64(min(done, total))/float64(total)) / 10
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// roundDuration rounds d for a person: 1.234s, 12.3s, 2m5s.
func roundDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < 10*time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

// connArgs are the flags given that reach this instance (-admin, -config; -token as a placeholder,
// never the token), for the commands a message suggests.
func connArgs(fs *flag.FlagSet) string {
	var b strings.Builder
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "token":
			b.WriteString(" -token TOKEN")
		case "admin", "config":
			v := f.Value.String()
			if strings.ContainsAny(v, " \t'\"$`\\") {
				v = strconv.Quote(v)
			}
			fmt.Fprintf(&b, " -%s %s", f.Name, v)
		}
	})
	return b.String()
}
