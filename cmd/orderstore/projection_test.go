package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/admin"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/status"
)

// roomForRebuild gives the shadow bucket's reservation room within
// jetstream.max_file_store (the test config's 2GiB has none: 507).
const roomForRebuild = "[jetstream]\nmax_file_store = \"4GiB\"\n"

// projectionCLI runs `orderstore projection ARGS -admin URL` in process.
func projectionCLI(adminURL string) func(args ...string) (int, string, string) {
	return func(args ...string) (int, string, string) {
		var out, errb strings.Builder
		code := run(context.Background(), append([]string{"projection"}, append(args, "-admin", adminURL)...), &out, &errb)
		return code, out.String(), errb.String()
	}
}

// hasLine reports whether out has a line matching the regular expression
// (the summary is a table: columns apart by spaces).
func hasLine(out, re string) bool {
	return regexp.MustCompile(`(?m)^` + re + `$`).MatchString(out)
}

// orderstore projection rebuild (following, -from-seq, -from-time
// -replace-partial, -detach), projection status and rebuild -cancel
// against a running instance: the summaries' numbers are what the events
// published make of them.
func TestProjectionRebuildCommand(t *testing.T) {
	a := startInProcess(t, roomForRebuild)
	cli := projectionCLI(a.adminURL)

	code, out, errs := cli("status")
	if code != exitOK || strings.TrimSpace(out) != "no projection rebuild has run on this store" {
		t.Errorf("projection status before any rebuild: exit %d\n%s\n%s", code, out, errs)
	}
	if code, out, errs := cli("status", "-json"); code != exitOK || strings.TrimSpace(out) != "null" {
		t.Errorf("projection status -json before any rebuild: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = cli("rebuild", "-cancel")
	if code != exitFailure || out != "" || !strings.Contains(errs, "409") || !strings.Contains(errs, "no projection rebuild is under way") ||
		!strings.Contains(errs, "hint: 'orderstore projection status -admin "+a.adminURL+"' shows") {
		t.Errorf("rebuild -cancel with none under way: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}

	// seq 1..10: 10 orders with one event each; 11..15: the first event
	// of 5 more; 16, 17: poison (dead-lettered by the processor); 18..22:
	// the 5 orders' second event; 23..38: 8 orders with two events each.
	nc, err := nats.Connect(a.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	seq := uint64(0)
	publish := func(subject, body string) {
		t.Helper()
		ack, err := js.Publish(ctx, subject, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if seq++; ack.Sequence != seq {
			t.Fatalf("published at seq %d, want %d", ack.Sequence, seq)
		}
	}
	for i := range 10 {
		publish("orders.created", fmt.Sprintf(`{"order_id":"early-%d","status":"new"}`, i))
	}
	for i := range 5 {
		publish("orders.created", fmt.Sprintf(`{"order_id":"both-%d","status":"new"}`, i))
	}
	publish("orders.created", `not json`)
	publish("orders.created", `{"no_order_id":true}`)
	time.Sleep(20 * time.Millisecond)
	mid := time.Now().UTC()
	time.Sleep(20 * time.Millisecond)
	for i := range 5 {
		publish("orders.paid", fmt.Sprintf(`{"order_id":"both-%d","status":"paid"}`, i))
	}
	for i := range 8 {
		publish("orders.created", fmt.Sprintf(`{"order_id":"late-%d","status":"new"}`, i))
		publish("orders.paid", fmt.Sprintf(`{"order_id":"late-%d","status":"paid"}`, i))
	}
	const events, orders = 38, 23
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		var out, errb strings.Builder
		if code := run(ctx, []string{"status", "-json", "-admin", a.adminURL}, &out, &errb); code != exitOK {
			return fmt.Errorf("status: exit %d %s", code, errb.String())
		}
		var st status.Status
		if err := json.Unmarshal([]byte(out.String()), &st); err != nil {
			return err
		}
		if c := st.Consumer; c == nil || c.Pending+uint64(c.AckPending) != 0 || st.DeadLetters.Messages != 2 || st.Projection.Orders != orders {
			return fmt.Errorf("not processed yet: consumer %+v, %d dead letters, %d orders", c, st.DeadLetters.Messages, st.Projection.Orders)
		}
		return nil
	})

	// The whole stream, followed to its end.
	code, out, errs = cli("rebuild")
	if code != exitOK {
		t.Fatalf("projection rebuild: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	for _, re := range []string{
		`projection rebuild \S+: done in \S+ \(requested\)`,
		fmt.Sprintf(`events folded +%d, seq 1\.\.%d`, events, events),
		fmt.Sprintf(`orders rebuilt +%d .*`, orders),
		`partial, kept +0 .*`,
		`conflicts, kept +0 .*`,
		`untouched +0 .*`,
		`started +\S+, ended \S+`,
	} {
		if !hasLine(out, re) {
			t.Errorf("projection rebuild's summary lacks a line %q:\n%s", re, out)
		}
	}
	checkSkipped(t, out, 2)
	if !strings.Contains(errs, "started (requested)") || !strings.Contains(errs, "Ctrl-C stops following, not the rebuild") || strings.Contains(errs, "\033") {
		t.Errorf("projection rebuild's stderr (not a terminal: plain lines, no ANSI):\n%q", errs)
	}

	// From seq 18: the 8 late orders rebuilt, the 5 with an earlier event
	// kept (partial), the 10 early ones untouched.
	code, out, errs = cli("rebuild", "-from-seq", "18", "-json")
	var st status.Rebuild
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != exitOK {
		t.Fatalf("projection rebuild -from-seq 18 -json: exit %d, %v\nstdout: %s\nstderr: %s", code, err, out, errs)
	}
	if st.State != status.RebuildDone || st.FromSeq != 18 || st.Position != events || st.Done != events-17 || st.Total != events-17 ||
		st.Rebuilt != 8 || st.Partial != 5 || st.Untouched != 10 || st.Conflicts != 0 || st.Poison != 0 || st.DeadLettered != 0 || st.EndedAt == nil {
		t.Errorf("projection rebuild -from-seq 18: %+v", st)
	}

	// From a time between seq 17 and 18, replacing the partial orders.
	code, out, errs = cli("rebuild", "-from-time", mid.Format(time.RFC3339Nano), "-replace-partial")
	if code != exitOK || !hasLine(out, `events folded +21, seq 18\.\.38`) || !hasLine(out, `orders rebuilt +13 .*`) ||
		!hasLine(out, `partial, kept +0 \(events before seq 18 or no longer in the stream; -replace-partial: .*`) || !hasLine(out, `untouched +10 .*`) {
		t.Errorf("projection rebuild -from-time %s -replace-partial: exit %d\nstdout: %s\nstderr: %s", mid.Format(time.RFC3339Nano), code, out, errs)
	}

	// -detach returns at once; projection status shows it.
	code, out, errs = cli("rebuild", "-detach")
	if code != exitOK || !regexp.MustCompile(`^projection rebuild \S+ started in the background\n$`).MatchString(out) ||
		!strings.Contains(errs, "watch it: orderstore projection status -admin "+a.adminURL) ||
		!strings.Contains(errs, "cancel it: orderstore projection rebuild -cancel -admin "+a.adminURL) {
		t.Fatalf("projection rebuild -detach: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	id := strings.Fields(out)[2]
	embeddedtest.WaitFor(t, time.Minute, func() error {
		code, out, errs := cli("status")
		if code != exitOK || !strings.Contains(out, "projection rebuild "+id) {
			return fmt.Errorf("projection status: exit %d\n%s\n%s", code, out, errs)
		}
		if !hasLine(out, `projection rebuild \S+: done in .*`) {
			return fmt.Errorf("not done yet:\n%s", out)
		}
		return nil
	})
	code, out, errs = cli("status")
	if code != exitOK || !hasLine(out, fmt.Sprintf(`events folded +%d, seq 1\.\.%d`, events, events)) || !hasLine(out, fmt.Sprintf(`orders rebuilt +%d .*`, orders)) {
		t.Errorf("projection status after -detach: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	checkSkipped(t, out, 2)
	code, out, errs = cli("status", "-json")
	st = status.Rebuild{}
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != exitOK || st.ID != id || st.State != status.RebuildDone || st.Rebuilt != orders {
		t.Errorf("projection status -json: exit %d, %v: %+v\n%s", code, err, st, errs)
	}

	// None under way any more: -cancel is refused.
	if code, out, errs := cli("rebuild", "-cancel"); code != exitFailure || out != "" || !strings.Contains(errs, "409 Conflict: no projection rebuild is under way") {
		t.Errorf("rebuild -cancel after the end: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
}

// checkSkipped checks the summary's skipped line: the two events the
// processor dead-lettered, poison both, are skipped (counted as poison or
// as dead letters: the server may count a poison event in the dead
// letters either way).
func checkSkipped(t *testing.T, out string, want int) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^skipped +(\d+) poison, (\d+) dead letters \(the live projection holds neither\)$`).FindStringSubmatch(out)
	if m == nil {
		t.Errorf("no skipped line:\n%s", out)
		return
	}
	var p, d int
	fmt.Sscan(m[1], &p)
	fmt.Sscan(m[2], &d)
	if p+d != want {
		t.Errorf("skipped %d poison and %d dead letters, want %d in all:\n%s", p, d, want, out)
	}
}

// Without room for the shadow bucket the rebuild is refused with the
// server's numbers, and nothing else happens. The admin token is needed,
// as for the rest of the API.
func TestProjectionRebuildNoRoom(t *testing.T) {
	const token = "s3cret-token-0123456789"
	a := startInProcess(t, "[admin]\ntoken = \""+token+"\"\n")
	noToken := projectionCLI(a.adminURL)
	for _, args := range [][]string{{"rebuild"}, {"rebuild", "-cancel"}, {"status"}} {
		if code, out, errs := noToken(args...); code != exitFailure || out != "" || !strings.Contains(errs, "401 unauthorized") || !strings.Contains(errs, "hint: pass -token") {
			t.Errorf("projection %q without the token: exit %d\nstdout: %s\nstderr: %s", args, code, out, errs)
		}
	}
	cli := func(args ...string) (int, string, string) { return noToken(append(args, "-token", token)...) }
	code, out, errs := cli("rebuild")
	if code != exitFailure || out != "" || !strings.Contains(errs, "507 Insufficient Storage: no room for the rebuild's shadow projection") ||
		!strings.Contains(errs, "raise jetstream.max_file_store by") || strings.Contains(errs, "started") {
		t.Errorf("projection rebuild without room: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	if code, out, _ := cli("status"); code != exitOK || !strings.Contains(out, "no projection rebuild has run") {
		t.Errorf("projection status after a refused rebuild: exit %d %s", code, out)
	}
}

// Bad flags are usage errors, with a message, before any request.
func TestProjectionCommandUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "usage: orderstore projection rebuild"},
		{[]string{"rebuilt"}, "usage: orderstore projection rebuild"},
		{[]string{"rebuild", "-from-seq", "3", "-from-time", "2026-12-01T00:00:00Z"}, "-from-seq and -from-time do not go together"},
		{[]string{"rebuild", "-from-time", "yesterday"}, `-from-time "yesterday" is not an RFC 3339 time`},
		{[]string{"rebuild", "-from-time", "2026-12-01"}, `is not an RFC 3339 time`},
		{[]string{"rebuild", "-from-seq", "-1"}, "invalid value"},
		{[]string{"rebuild", "-cancel", "-from-seq", "3"}, "-cancel takes no -from-seq"},
		{[]string{"rebuild", "-cancel", "-replace-partial"}, "-cancel takes no"},
		{[]string{"rebuild", "now"}, `unexpected argument "now"`},
		{[]string{"status", "-from-seq", "3"}, "flag provided but not defined: -from-seq"},
		{[]string{"status", "-detach"}, "flag provided but not defined: -detach"},
	} {
		var out, errb strings.Builder
		// An address nothing listens on: a usage error must not reach it.
		code := run(context.Background(), append(append([]string{"projection"}, tc.args...), "-admin", "http://127.0.0.1:1"), &out, &errb)
		if code != exitUsage || !strings.Contains(errb.String(), tc.want) || out.Len() != 0 {
			t.Errorf("projection %q: exit %d, want %d and %q\nstdout: %s\nstderr: %s", tc.args, code, exitUsage, tc.want, out.String(), errb.String())
		}
	}
	var out, errb strings.Builder
	if code := run(context.Background(), []string{"projection", "status", "-admin", "http://127.0.0.1:1"}, &out, &errb); code != exitFailure ||
		!strings.Contains(errb.String(), "hint: is orderstore running?") {
		t.Errorf("projection status with nothing listening: exit %d\n%s", code, errb.String())
	}
	out.Reset()
	if run(context.Background(), []string{"help"}, &out, &errb); !strings.Contains(out.String(), "projection rebuild") || !strings.Contains(out.String(), "projection status") {
		t.Errorf("help does not list the projection commands:\n%s", out.String())
	}
}

// stubRebuild is a rebuild that folds until canceled: the admin API's
// real handlers in front of it, for what a real rebuild is too quick to
// show (Ctrl-C while following, a cancel followed to its end) and for
// the refusals a real appliance gives only in a cluster or mid-rebuild.
type stubRebuild struct {
	mu       sync.Mutex
	st       *status.Rebuild
	refuse   error // RebuildProjection's
	canceled int
	polls    int
}

func (s *stubRebuild) RebuildProjection(_ context.Context, req status.RebuildRequest) (*status.Rebuild, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refuse != nil {
		return nil, s.refuse
	}
	s.st = &status.Rebuild{ID: "stub-1", State: status.RebuildFolding, Reason: "requested", FromSeq: max(req.FromSeq, 1), StartedAt: time.Now().UTC()}
	out := *s.st
	return &out, nil
}

func (s *stubRebuild) RebuildStatus() *status.Rebuild {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st == nil {
		return nil
	}
	s.polls++
	if s.st.State == status.RebuildFolding {
		s.st.Total, s.st.Head = 1_000_000, 1_000_000
		s.st.Done = min(uint64(s.polls)*1000, s.st.Total-1)
		s.st.Position, s.st.Rate, s.st.ETASeconds = s.st.Done, 2000, float64(s.st.Total-s.st.Done)/2000
	}
	out := *s.st
	return &out
}

func (s *stubRebuild) CancelRebuild() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st == nil || !s.st.Running() {
		return &admin.RebuildError{Code: http.StatusConflict, Err: errors.New("no projection rebuild is under way")}
	}
	s.canceled++
	end := time.Now().UTC()
	s.st.State, s.st.EndedAt = status.RebuildCanceled, &end
	return nil
}

func stubAdmin(t *testing.T, r *stubRebuild) string {
	t.Helper()
	srv := admin.New(admin.Config{Stream: "ORDER_EVENTS", DeadLetterStream: "ORDER_EVENTS_DLQ"})
	srv.SetBackend(admin.Backend{Rebuild: r})
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return hs.URL
}

// Ctrl-C while following stops the following, not the rebuild: the real
// binary, a real SIGINT, exit 130 and what to run next.
func TestProjectionRebuildInterrupted(t *testing.T) {
	r := &stubRebuild{}
	url := stubAdmin(t, r)
	p := start(t, nil, "projection", "rebuild", "-admin", url)
	embeddedtest.WaitFor(t, 20*time.Second, func() error {
		if !strings.Contains(p.stderr.String(), "events/s") {
			return fmt.Errorf("no progress line yet:\n%s", p.stderr)
		}
		return nil
	})
	p.signal(os.Interrupt)
	if code := p.wait(20 * time.Second); code != exitInterrupted {
		t.Fatalf("exit %d after SIGINT, want %d:\n%s", code, exitInterrupted, p.stderr)
	}
	out := p.stderr.String()
	for _, want := range []string{
		"stopped following: the projection rebuild stub-1 goes on in the background (folding, ",
		"watch it:  orderstore projection status -admin " + url,
		"cancel it: orderstore projection rebuild -cancel -admin " + url,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if regexp.MustCompile(`projection rebuild: folding +[0-9.]+% \d+/1000000 events, 2000 events/s, ETA \S+`).FindString(out) == "" {
		t.Errorf("no plain progress line with done/total, rate and ETA:\n%s", out)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.canceled != 0 || r.st.State != status.RebuildFolding {
		t.Errorf("the rebuild was canceled (%d) or ended (%s) by the interrupt", r.canceled, r.st.State)
	}
}

// -cancel cancels the rebuild under way and waits for it to stop;
// refusals print the server's text.
func TestProjectionRebuildCancelAndRefusals(t *testing.T) {
	r := &stubRebuild{}
	url := stubAdmin(t, r)
	cli := projectionCLI(url)
	if code, out, errs := cli("rebuild", "-detach", "-json"); code != exitOK || !strings.Contains(out, `"state": "folding"`) {
		t.Fatalf("rebuild -detach -json: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs := cli("rebuild", "-cancel")
	if code != exitOK || !hasLine(out, `projection rebuild stub-1: canceled in \S+ \(requested\)`) || !hasLine(out, `live projection +as it was .*`) ||
		!strings.Contains(errs, "cancel requested: projection rebuild stub-1 stops") {
		t.Errorf("rebuild -cancel: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	// status of a canceled rebuild: reported, exit 0.
	if code, out, _ := cli("status"); code != exitOK || !strings.Contains(out, "canceled") {
		t.Errorf("status after cancel: exit %d\n%s", code, out)
	}
	for _, tc := range []struct {
		code int
		msg  string
		want []string
	}{
		{http.StatusConflict, "a projection rebuild is already under way", []string{"409 Conflict: a projection rebuild is already under way",
			"hint: watch it with 'orderstore projection status -admin " + url + "', or cancel it with 'orderstore projection rebuild -cancel -admin " + url + "'"}},
		{http.StatusNotImplemented, "the projection cannot be rebuilt here: in a cluster ...", []string{"501 Not Implemented: the projection cannot be rebuilt here: in a cluster ..."}},
		{http.StatusInsufficientStorage, "no room for the rebuild's shadow projection: ...; raise jetstream.max_file_store by 1.0 GiB", []string{"507 Insufficient Storage: no room", "raise jetstream.max_file_store by 1.0 GiB"}},
	} {
		r.mu.Lock()
		r.refuse = &admin.RebuildError{Code: tc.code, Err: errors.New(tc.msg)}
		r.mu.Unlock()
		code, out, errs := cli("rebuild")
		if code != exitFailure || out != "" || strings.Contains(errs, "started") {
			t.Errorf("rebuild refused %d: exit %d\nstdout: %s\nstderr: %s", tc.code, code, out, errs)
		}
		for _, w := range tc.want {
			if !strings.Contains(errs, w) {
				t.Errorf("rebuild refused %d: stderr lacks %q:\n%s", tc.code, w, errs)
			}
		}
	}
}

// On a terminal the progress is one line redrawn, with a bar; elsewhere
// plain lines without escapes.
func TestProjectionRebuildProgressLine(t *testing.T) {
	folding := &status.Rebuild{State: status.RebuildFolding, Done: 250, Total: 1000, Rate: 125, ETASeconds: 6}
	taking := &status.Rebuild{State: status.RebuildTakingOver, Done: 1000, Total: 1000, Copied: 30, ToCopy: 40}
	var b bytes.Buffer
	p := &rebuildProgress{w: &b, tty: true, width: 8}
	p.show(folding)
	p.show(taking)
	p.clear()
	want := "\r\033[Kfolding [##------]  25.0% 250/1000 events, 125 events/s, ETA 6s" +
		"\r\033[Ktaking over [######--] 30/40 orders copied (the live processor is paused)" + "\r\033[K"
	if b.String() != want {
		t.Errorf("terminal progress:\n got %q\nwant %q", b.String(), want)
	}
	b.Reset()
	p = &rebuildProgress{w: &b, width: 8}
	p.show(folding)
	p.show(folding) // within rebuildPlainEvery: not again
	p.show(taking)  // a new state: at once
	p.clear()
	want = "projection rebuild: folding  25.0% 250/1000 events, 125 events/s, ETA 6s\n" +
		"projection rebuild: taking over 30/40 orders copied (the live processor is paused)\n"
	if b.String() != want {
		t.Errorf("plain progress:\n got %q\nwant %q", b.String(), want)
	}
	for _, tc := range []struct {
		st   *status.Rebuild
		want string
	}{
		{&status.Rebuild{State: status.RebuildFolding}, "folding: reading the stream and the dead letters"},
		{&status.Rebuild{State: status.RebuildFolding, Done: 19999, Total: 20000}, "folding [#######-]  99.9% 19999/20000 events"},
		{&status.Rebuild{State: status.RebuildTakingOver, Done: 20, Total: 20}, "taking over: folding the last events (the live processor is paused)"},
		{&status.Rebuild{State: status.RebuildTakingOver, Copied: 1, ToCopy: 4, Error: "takeover: boom (retried at the next start)"},
			"taking over [##------] 1/4 orders copied (the live processor is paused) (takeover: boom (retried at the next start))"},
	} {
		if got := (&rebuildProgress{tty: true, width: 8}).line(tc.st); got != tc.want {
			t.Errorf("line(%+v):\n got %q\nwant %q", tc.st, got, tc.want)
		}
	}
}

// orderstore status names a rebuild under way, and nothing once it ended.
func TestStatusShowsProjectionRebuild(t *testing.T) {
	st := status.Status{Status: "ready", Rebuild: &status.Rebuild{ID: "r1", State: status.RebuildFolding, Done: 10, Total: 40}}
	var b strings.Builder
	printStatus(&b, st)
	if !hasLine(b.String(), `  rebuild +folding, 10 of 40 events \(orderstore projection status\)`) {
		t.Errorf("status while a rebuild folds:\n%s", b.String())
	}
	st.Rebuild.State = status.RebuildDone
	b.Reset()
	printStatus(&b, st)
	if strings.Contains(b.String(), "rebuild") {
		t.Errorf("status after the rebuild ended:\n%s", b.String())
	}
}
