package processor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/processor"
)

// LatestDeadLetters returns the n most recent dead letters that remain,
// oldest first, also when replays removed some of the latest ones.
func TestLatestDeadLetters(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	dlq := e.cfg.Processor.DeadLetterStream
	seqs := func(dls []processor.DeadLetter) []uint64 {
		out := []uint64{}
		for _, d := range dls {
			out = append(out, d.Sequence)
		}
		return out
	}

	// None yet: empty, non-nil slices (served as [] rather than null).
	latest, err := processor.LatestDeadLetters(ctx, e.js, dlq, 10)
	if err != nil {
		t.Fatal(err)
	}
	list, _, err := processor.ListDeadLetters(ctx, e.js, dlq, 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string][]processor.DeadLetter{"LatestDeadLetters": latest, "ListDeadLetters": list} {
		if b, _ := json.Marshal(got); got == nil || string(b) != "[]" {
			t.Errorf("%s on an empty stream = %#v (JSON %s), want an empty non-nil slice", name, got, b)
		}
	}

	// Eight dead letters, as the processor writes them.
	prefix := e.processorConfig(nil).DeadLetterSubjectPrefix
	var msgs []*nats.Msg
	for i := 1; i <= 8; i++ {
		m := nats.NewMsg(prefix + ".orders.created")
		m.Header.Set(processor.HeaderSubject, "orders.created")
		m.Header.Set(processor.HeaderSequence, strconv.Itoa(100+i))
		m.Header.Set(processor.HeaderError, "poison event: no order_id")
		m.Data = []byte(`{}`)
		msgs = append(msgs, m)
	}
	e.publish(t, msgs)
	s, err := e.js.Stream(ctx, dlq)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name   string
		remove []uint64 // from the dead-letter stream first, as Replay does
		n      int
		want   []uint64
	}{
		{name: "fewer than stored", n: 3, want: []uint64{6, 7, 8}},
		{name: "all", n: 8, want: []uint64{1, 2, 3, 4, 5, 6, 7, 8}},
		{name: "more than stored", n: 50, want: []uint64{1, 2, 3, 4, 5, 6, 7, 8}},
		{name: "zero means the default 100", n: 0, want: []uint64{1, 2, 3, 4, 5, 6, 7, 8}},
		{name: "one", n: 1, want: []uint64{8}},
		{name: "latest ones replayed", remove: []uint64{5, 6, 7}, n: 3, want: []uint64{3, 4, 8}},
		{name: "the last one replayed", remove: []uint64{8}, n: 3, want: []uint64{2, 3, 4}},
		{name: "the first one replayed", remove: []uint64{1}, n: 10, want: []uint64{2, 3, 4}},
		{name: "all replayed", remove: []uint64{2, 3, 4}, n: 3, want: []uint64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, seq := range tt.remove {
				if err := s.DeleteMsg(ctx, seq); err != nil {
					t.Fatal(err)
				}
			}
			got, err := processor.LatestDeadLetters(ctx, e.js, dlq, tt.n)
			if err != nil {
				t.Fatal(err)
			}
			if got == nil || !slices.Equal(seqs(got), tt.want) {
				t.Errorf("LatestDeadLetters(%d) = sequences %v (nil: %t), want %v", tt.n, seqs(got), got == nil, tt.want)
			}
			for _, d := range got {
				if d.Subject != "orders.created" || d.OriginalSequence != 100+d.Sequence || d.Error == "" {
					t.Errorf("dead letter %+v: headers not decoded", d)
				}
			}
			// The same as the tail of the full list.
			all, _, err := processor.ListDeadLetters(ctx, e.js, dlq, 1, 1000)
			if err != nil {
				t.Fatal(err)
			}
			n := tt.n
			if n == 0 {
				n = 100
			}
			if tail := seqs(all)[max(len(all)-n, 0):]; !slices.Equal(seqs(got), tail) {
				t.Errorf("LatestDeadLetters(%d) = %v, not the tail of ListDeadLetters %v", tt.n, seqs(got), seqs(all))
			}
		})
	}
}

// bigDeadLetters is an env whose dead-letter stream dlq holds bigCount
// dead letters of big each, 18 MiB in all.
func bigDeadLetters(t *testing.T) (e *env, dlq, big string) {
	e = newEnv(t)
	dlq = e.cfg.Processor.DeadLetterStream
	big = strings.Repeat("x", 900<<10)
	for i := range bigCount {
		if _, err := e.js.Publish(context.Background(), "dlq."+dlq+".orders.created", []byte(big), jetstream.WithMsgID(fmt.Sprint("big-", i))); err != nil {
			t.Fatal(err)
		}
	}
	return e, dlq, big
}

// bigCount is how many dead letters bigDeadLetters stores.
const bigCount = 20

// A page of dead letters is bounded in bytes too: large dead letters come
// in several pages, each about MaxPageBytes, and every one is listed.
func TestListDeadLettersPagesByBytes(t *testing.T) {
	e, dlq, big := bigDeadLetters(t)
	ctx := context.Background()
	seen, pages := 0, 0
	for from := uint64(1); ; {
		items, next, err := processor.ListDeadLetters(ctx, e.js, dlq, from, 1000)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if b := len(items) * len(big); b > processor.MaxPageBytes+len(big)+(1<<20) {
			t.Fatalf("page %d holds %d bytes of payload, more than MaxPageBytes", pages, b)
		}
		seen += len(items)
		if next == 0 {
			break
		}
		from = next
	}
	if seen != bigCount || pages < 2 {
		t.Fatalf("listed %d of %d in %d pages, want all of them in more than one", seen, bigCount, pages)
	}
}

// The latest dead letters are the newest even when a window of them holds
// more than MaxPageBytes: as many of the newest as fit in it.
func TestLatestDeadLettersLargeOnes(t *testing.T) {
	e, dlq, _ := bigDeadLetters(t)
	ctx := context.Background()
	var all []processor.DeadLetter // in pages of MaxPageBytes
	for from := uint64(1); from != 0; {
		page, next, err := processor.ListDeadLetters(ctx, e.js, dlq, from, 1000)
		if err != nil {
			t.Fatal(err)
		}
		all, from = append(all, page...), next
	}
	if len(all) != bigCount {
		t.Fatalf("listed %d dead letters, want %d", len(all), bigCount)
	}
	size := func(d processor.DeadLetter) int { return len(d.Data) + processor.HeaderSize(d.Header) }
	for _, limit := range []int{1, 3, 15, 100} {
		got, err := processor.LatestDeadLetters(ctx, e.js, dlq, limit)
		if err != nil {
			t.Fatal(err)
		}
		// The newest, as many as limit allows and MaxPageBytes holds.
		want, bytes := 0, 0
		for i := bigCount - 1; i >= 0 && want < limit && bytes+size(all[i]) <= processor.MaxPageBytes; i-- {
			want, bytes = want+1, bytes+size(all[i])
		}
		var seqs []uint64
		for _, d := range got {
			seqs = append(seqs, d.Sequence)
		}
		if len(got) != want || len(got) == 0 || got[len(got)-1].Sequence != bigCount || got[0].Sequence != uint64(bigCount-want+1) {
			t.Errorf("LatestDeadLetters(%d) = sequences %v, want the newest %d, up to %d", limit, seqs, want, bigCount)
		}
	}
}

// An order's dead letters are bounded in bytes, as a page of
// ListDeadLetters is: large ones of one order do not all come back at
// once, the newest always does, and complete says that some were left.
func TestOrderDeadLettersBoundedByBytes(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	dlq := e.cfg.Processor.DeadLetterStream
	big := `{"order_id":"big","pad":"` + strings.Repeat("x", 900<<10) + `"}`
	for i := range bigCount {
		if _, err := e.js.Publish(ctx, "dlq."+dlq+".orders.created", []byte(big), jetstream.WithMsgID(fmt.Sprint("big-", i))); err != nil {
			t.Fatal(err)
		}
	}
	items, complete, err := processor.OrderDeadLetters(ctx, e.js, dlq, "big", 10_000, 100)
	if err != nil {
		t.Fatal(err)
	}
	if b := len(items) * len(big); len(items) == 0 || b > processor.MaxPageBytes+len(big) || complete {
		t.Fatalf("%d dead letters (%d bytes of payload), complete %v; want at most MaxPageBytes and one more, not complete", len(items), b, complete)
	}
	if items[0].Sequence != bigCount {
		t.Errorf("first dead letter is %d, want the newest, %d", items[0].Sequence, bigCount)
	}
}

// The scan for an order's dead letters visits at most scan sequences,
// replayed (removed) ones included: a long run of them costs no more
// than as many dead letters.
func TestOrderDeadLettersScanBoundsRemoved(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	dlq := e.cfg.Processor.DeadLetterStream
	const removed, scan = 60, 10
	for i := range removed + 1 {
		if _, err := e.js.Publish(ctx, "dlq."+dlq+".orders.created", fmt.Appendf(nil, `{"order_id":"o-%d"}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	s, err := e.js.Stream(ctx, dlq)
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(2); seq <= removed+1; seq++ { // the first stays
		if err := s.DeleteMsg(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	// Count the stream's get requests on a connection of the test's own.
	nc := e.js.Conn()
	var subs []*nats.Subscription
	for _, subj := range []string{"$JS.API.STREAM.MSG.GET." + dlq, "$JS.API.DIRECT.GET." + dlq, "$JS.API.DIRECT.GET." + dlq + ".>"} {
		sub, err := nc.SubscribeSync(subj)
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	_, complete, err := processor.OrderDeadLetters(ctx, e.js, dlq, "o-0", scan, 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, sub := range subs {
		k, _, _ := sub.Pending()
		n += k
	}
	if n > scan || complete {
		t.Errorf("%d gets (complete %v) for a scan of %d over %d removed dead letters; want at most %d, not complete", n, complete, scan, removed, scan)
	}
}

// cancelAfterPublish is a real JetStream whose PublishMsg, once the stream
// stored the event, cancels the caller's context, as an HTTP client that
// hangs up right then does.
type cancelAfterPublish struct {
	jetstream.JetStream
	cancel context.CancelFunc
}

func (j cancelAfterPublish) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	ack, err := j.JetStream.PublishMsg(ctx, m, opts...)
	j.cancel()
	return ack, err
}

// A replay whose caller goes away once the event is republished still
// removes the dead letter: left listed, it would be replayed again and,
// past the duplicate window, stored twice.
func TestReplayOutlivesItsCaller(t *testing.T) {
	e := newEnv(t)
	dlq := e.cfg.Processor.DeadLetterStream
	m := nats.NewMsg(e.processorConfig(nil).DeadLetterSubjectPrefix + ".orders.created")
	m.Header.Set(processor.HeaderSubject, "orders.created")
	m.Header.Set(processor.HeaderSequence, "7")
	m.Data = []byte(`{"order_id":"o-1"}`)
	e.publish(t, []*nats.Msg{m})

	ctx, cancel := context.WithCancel(context.Background())
	newSeq, err := processor.Replay(ctx, cancelAfterPublish{e.js, cancel}, dlq, 1)
	if ctx.Err() == nil {
		t.Fatal("the caller's context was not canceled after the publish")
	}
	if err != nil || newSeq != 1 {
		t.Errorf("Replay = %d, %v; want event 1 and no error", newSeq, err)
	}
	if dls, _, err := processor.ListDeadLetters(context.Background(), e.js, dlq, 1, 10); err != nil || len(dls) != 0 {
		t.Errorf("dead letters after the replay: %+v (%v), want none", dls, err)
	}
}

// A replay answered "duplicate" removes its dead letter only when the event stored under the
// replay's id is this replay (one done before, cut off before the removal). When another event
// holds that id, the dead letter was removed unreplayed (its event lost); now it stays listed and
// the error says what holds the id.
func TestReplayDuplicateOnlyOfItself(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	dlq := e.cfg.Processor.DeadLetterStream
	deadLetter := func(data string) *nats.Msg {
		m := nats.NewMsg(e.processorConfig(nil).DeadLetterSubjectPrefix + ".orders.created")
		m.Header.Set(processor.HeaderSubject, "orders.created")
		m.Header.Set(processor.HeaderSequence, "7")
		m.Data = []byte(data)
		return m
	}
	taken := nats.NewMsg("orders.created")
	taken.Header.Set(jetstream.MsgIDHeader, processor.ReplayMsgIDPrefix(dlq)+"1")
	taken.Header.Set(processor.HeaderReplayOf, "7")
	taken.Data = []byte(`{"order_id":"other"}`)
	// The replay of dead letter 2, stored before a crash kept it from removing the dead letter.
	done := nats.NewMsg("orders.created")
	done.Header.Set(jetstream.MsgIDHeader, processor.ReplayMsgIDPrefix(dlq)+"2")
	done.Header.Set(processor.HeaderReplayOf, "7")
	done.Data = []byte(`{"order_id":"o-2"}`)
	e.publish(t, []*nats.Msg{taken, done})
	e.publish(t, []*nats.Msg{deadLetter(`{"order_id":"o-1"}`), deadLetter(`{"order_id":"o-2"}`)})

	if seq, err := processor.Replay(ctx, e.js, dlq, 1); !errors.Is(err, processor.ErrReplayIDTaken) || !strings.Contains(err.Error(), "#1") || !strings.Contains(err.Error(), "kept") {
		t.Errorf("replay of dead letter 1, whose id event 1 holds: %d, %v; want an error naming event 1, the dead letter kept", seq, err)
	}
	if seq, err := processor.Replay(ctx, e.js, dlq, 2); err != nil || seq != 2 {
		t.Errorf("replay of dead letter 2, replayed before as event 2: %d, %v; want event 2", seq, err)
	}
	dls, _, err := processor.ListDeadLetters(ctx, e.js, dlq, 1, 10)
	if err != nil || len(dls) != 1 || dls[0].Sequence != 1 {
		t.Errorf("dead letters after the replays: %+v (%v), want dead letter 1 alone", dls, err)
	}
}
