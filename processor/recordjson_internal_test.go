package processor

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// marshalRecord writes what json.Marshal writes, and fails where it fails, for every kind of
// field value: strings JSON or HTML escape, invalid UTF-8, times in other zones or years, empty
// and nil lists, negative counts.
func TestMarshalRecordIsJSONMarshal(t *testing.T) {
	strs := []string{"", "o-1", "paid", `say "hi"`, `back\slash`, "<b>&amp;</b>", "tab\there", "nl\n",
		"\x00\x1f\x7f", "café", "\u2028\u2029", "\xff\xfe", "emoji 🎉", "a/b.c=d_e", "\ufeff"}
	zone := time.FixedZone("x", 3600)
	odd := time.FixedZone("odd", 30)
	utc0 := time.Date(2026, 12, 7, 22, 30, 20, 123456789, time.UTC)
	times := []time.Time{{}, utc0, utc0.Truncate(time.Second), utc0.Truncate(time.Millisecond),
		utc0.In(zone), utc0.In(odd), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		utc0.In(time.FixedZone("zero", 0)), time.Now(), time.Now().UTC()}
	seqs := [][]uint64{nil, {}, {1}, {1, 2, 3}, {0, math.MaxUint64}}
	ints := []int{0, 1, -1, math.MaxInt, math.MinInt}
	uints := []uint64{0, 1, math.MaxUint64}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(n int) int { return rng.IntN(n) }
	check := func(r record) {
		t.Helper()
		want, werr := json.Marshal(r)
		got, gerr := marshalRecord(&r)
		if (werr != nil) != (gerr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("record %+v:\n got %s (%v)\nwant %s (%v)", r, got, gerr, want, werr)
		}
	}
	check(record{})
	for range 20000 {
		check(record{
			Order: Order{OrderID: strs[pick(len(strs))], Status: strs[pick(len(strs))], LastEvent: strs[pick(len(strs))],
				LastSeq: uints[pick(len(uints))], FirstSeq: uints[pick(len(uints))], Events: ints[pick(len(ints))],
				FirstEventAt: times[pick(len(times))], LastEventAt: times[pick(len(times))], UpdatedAt: times[pick(len(times))]},
			Applied: seqs[pick(len(seqs))], AppliedFloor: uints[pick(len(uints))], Withheld: seqs[pick(len(seqs))],
			History: seqs[pick(len(seqs))], HistoryChunks: ints[pick(len(ints))], HistoryBase: ints[pick(len(ints))],
			HistorySealedMax: uints[pick(len(uints))], HistoryUnordered: pick(2) == 1,
		})
	}
}

func FuzzMarshalRecord(f *testing.F) {
	f.Add("o-1", "paid", "orders.paid", uint64(7), int64(1765146620123456789), 0, []byte{1, 2})
	f.Add("<&>", "\xff", "\u2028", uint64(0), int64(-62135596800000000000/1e9), 3600, []byte{})
	f.Fuzz(func(t *testing.T, id, status, last string, seq uint64, unix int64, off int, raw []byte) {
		at := time.Unix(0, unix).In(time.FixedZone("", off%100000))
		var applied []uint64
		for _, c := range raw {
			applied = append(applied, uint64(c)*seq)
		}
		r := record{Order: Order{OrderID: id, Status: status, LastEvent: last, LastSeq: seq, Events: int(seq),
			FirstEventAt: at, LastEventAt: at.UTC(), UpdatedAt: at}, Applied: applied, History: applied,
			HistoryChunks: off, AppliedFloor: seq, HistoryUnordered: off%2 == 1}
		want, werr := json.Marshal(r)
		got, gerr := marshalRecord(&r)
		if (werr != nil) != (gerr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("got %s (%v)\nwant %s (%v)", got, gerr, want, werr)
		}
	})
}

func BenchmarkMarshalRecord(b *testing.B) {
	at := time.Date(2026, 12, 7, 22, 30, 20, 123456789, time.UTC)
	r := record{Order: Order{OrderID: "order-000123", Status: "paid", LastEvent: "paid", LastSeq: 123456,
		FirstSeq: 100000, Events: 40, FirstEventAt: at, LastEventAt: at, UpdatedAt: at}, AppliedFloor: 120000}
	for i := range uint64(40) {
		r.Applied = append(r.Applied, 120001+i*97)
		r.History = append(r.History, 100000+i*611)
	}
	b.Run("json.Marshal", func(b *testing.B) {
		for b.Loop() {
			if _, err := json.Marshal(r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("marshalRecord", func(b *testing.B) {
		for b.Loop() {
			if _, err := marshalRecord(&r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
