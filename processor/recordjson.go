package processor

import (
	"encoding/json"
	"strconv"
	"time"
)

// marshalRecord is json.Marshal(r), byte for byte, without reflection: the processor writes a
// record for every event it applies, and encoding/json took about a sixth of its CPU. What the fast
// path does not write as encoding/json would (a time it cannot write as RFC 3339: a zone offset,
// a year beyond 0..9999) goes to json.Marshal. TestMarshalRecordIsJSONMarshal holds them equal.
func marshalRecord(r *record) ([]byte, error) {
	o := &r.Order
	if !plainTime(o.FirstEventAt) || !plainTime(o.LastEventAt) || !plainTime(o.UpdatedAt) {
		return json.Marshal(r)
	}
	b := make([]byte, 0, 256+len(o.OrderID)+len(o.Status)+len(o.LastEvent)+
		12*(len(r.Applied)+len(r.Withheld)+len(r.History)))
	b = appendJSONString(append(b, `{"order_id":`...), o.OrderID)
	b = appendJSONString(append(b, `,"status":`...), o.Status)
	b = appendJSONString(append(b, `,"last_event":`...), o.LastEvent)
	b = strconv.AppendUint(append(b, `,"last_seq":`...), o.LastSeq, 10)
	b = strconv.AppendUint(append(b, `,"first_seq":`...), o.FirstSeq, 10)
	b = strconv.AppendInt(append(b, `,"events":`...), int64(o.Events), 10)
	b = appendJSONTime(append(b, `,"first_event_at":`...), o.FirstEventAt)
	b = appendJSONTime(append(b, `,"last_event_at":`...), o.LastEventAt)
	b = appendJSONTime(append(b, `,"updated_at":`...), o.UpdatedAt)
	b = appendSeqs(b, `,"applied":`, r.Applied)
	b = appendUintField(b, `,"applied_floor":`, r.AppliedFloor)
	b = appendSeqs(b, `,"withheld":`, r.Withheld)
	b = appendSeqs(b, `,"history":`, r.History)
	b = appendIntField(b, `,"history_chunks":`, r.HistoryChunks)
	b = appendIntField(b, `,"history_base":`, r.HistoryBase)
	b = appendUintField(b, `,"history_sealed_max":`, r.HistorySealedMax)
	if r.HistoryUnordered {
		b = append(b, `,"history_unordered":true`...)
	}
	return append(b, '}'), nil
}

// plainTime reports whether t's JSON is RFC 3339 in UTC as time.Time.MarshalJSON writes it.
func plainTime(t time.Time) bool {
	_, off := t.Zone()
	return off == 0 && t.Year() >= 0 && t.Year() <= 9999
}

// appendJSONTime appends t as time.Time.MarshalJSON does; t is plainTime.
func appendJSONTime(b []byte, t time.Time) []byte {
	return append(t.AppendFormat(append(b, '"'), time.RFC3339Nano), '"')
}

// appendJSONString appends s as encoding/json does: copied when it is printable ASCII that JSON
// and HTML leave alone, else by json.Marshal (escapes, HTML's <>&, invalid UTF-8).
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	return append(append(append(b, '"'), s...), '"')
}

// appendSeqs appends name and seqs as a JSON array, unless seqs is empty (omitempty).
func appendSeqs(b []byte, name string, seqs []uint64) []byte {
	if len(seqs) == 0 {
		return b
	}
	b = append(b, name...)
	for i, s := range seqs {
		b = strconv.AppendUint(append(b, "[,"[min(i, 1)]), s, 10)
	}
	return append(b, ']')
}

// appendIntField appends name and v, unless v is 0 (omitempty).
func appendIntField(b []byte, name string, v int) []byte {
	if v == 0 {
		return b
	}
	return strconv.AppendInt(append(b, name...), int64(v), 10)
}

// appendUintField appends name and v, unless v is 0 (omitempty).
func appendUintField(b []byte, name string, v uint64) []byte {
	if v == 0 {
		return b
	}
	return strconv.AppendUint(append(b, name...), v, 10)
}
