package admin

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/orderstore/orderstore/processor"
	"github.com/orderstore/orderstore/status"
)

// History reads an order's story through the projection's history index.
// Unknown orders match Backend.NotFound; processor.ErrNotRetained and
// processor.ErrNoHistory are answered 410 and 501.
type History interface {
	OrderEvents(ctx context.Context, id string, from, limit int) (processor.HistoryPage, error)
	OrderEventStates(ctx context.Context, id string, from, limit int) (processor.HistoryPage, error)
	OrderAsOf(ctx context.Context, id string, point processor.AsOfPoint) (processor.AsOfState, error)
	// OrderDeadLetters returns the order's dead letters among the most
	// recent ones (complete: all were read).
	OrderDeadLetters(ctx context.Context, id string) (items []processor.DeadLetter, complete bool, err error)
}

func toHistoryEvent(e processor.HistoryEvent) status.OrderEvent {
	h := status.OrderEvent{Position: e.Position, Seq: e.Sequence, Retained: e.Retained, Replaced: e.Replaced, Edge: e.Edge,
		Subject: e.Subject, Type: e.Type, Headers: e.Header, State: e.State}
	if e.Retained {
		t := e.Time
		h.Time = &t
		if json.Valid(e.Data) {
			h.Data = e.Data
		} else {
			h.DataBase64 = base64.StdEncoding.EncodeToString(e.Data)
		}
	}
	return h
}

// historyError answers err of a history call; false when there is none.
// asOf describes the point asked for, if any.
func (s *Server) historyError(w http.ResponseWriter, b *Backend, id, asOf string, err error) bool {
	switch {
	case err == nil:
		return false
	case b.NotFound != nil && errors.Is(err, b.NotFound) && asOf != "":
		writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("order %q had no event as of %s (or is not known)", clip(id), asOf)})
	case b.NotFound != nil && errors.Is(err, b.NotFound):
		writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("order %q not found", clip(id))})
	case errors.Is(err, processor.ErrNotRetained):
		writeJSON(w, http.StatusGone, map[string]string{"error": err.Error(),
			"hint": "the stream's retention (stream.max_age, max_bytes, max_msgs) removed the order's events up to that point; ask for a later point"})
	case errors.Is(err, processor.ErrNoHistory):
		writeJSON(w, http.StatusNotImplemented, map[string]string{"error": err.Error(),
			"hint": "the history index is kept by the built-in projection, within processor.history_max_bytes"})
	default:
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
	}
	return true
}

// orderEvents serves GET /v1/orders/{id}/events?from=&limit=&states=.
func (s *Server) orderEvents(w http.ResponseWriter, r *http.Request, b *Backend) {
	if b.History == nil {
		writeJSON(w, http.StatusNotImplemented, map[string]string{"error": "this server keeps no order history"})
		return
	}
	id := r.PathValue("id")
	q := r.URL.Query()
	from, err := queryInt(q.Get("from"), 0)
	if err != nil || from < 0 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "from must be a position in the order's history: 0 or more"})
		return
	}
	limit, err := queryInt(q.Get("limit"), 100)
	if err != nil || limit < 1 || limit > processor.MaxHistoryPage {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("limit must be 1..%d", processor.MaxHistoryPage)})
		return
	}
	states, err := queryBool(q.Get("states"))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "states must be true or false"})
		return
	}
	read := b.History.OrderEvents
	if states {
		read = b.History.OrderEventStates
	}
	page, err := read(r.Context(), id, from, limit)
	if s.historyError(w, b, id, "", err) {
		return
	}
	out := status.OrderEvents{OrderID: page.OrderID, Total: page.Total, Unindexed: page.Unindexed, From: page.From, Next: page.Next,
		Events: make([]status.OrderEvent, len(page.Events))}
	for i, e := range page.Events {
		out.Events[i] = toHistoryEvent(e)
	}
	writeJSON(w, http.StatusOK, out)
}

// orderAsOf serves GET /v1/orders/{id}?as_of=RFC3339&as_of_seq=N.
func (s *Server) orderAsOf(w http.ResponseWriter, r *http.Request, b *Backend) {
	if b.History == nil {
		writeJSON(w, http.StatusNotImplemented, map[string]string{"error": "this server keeps no order history"})
		return
	}
	id := r.PathValue("id")
	q := r.URL.Query()
	var point processor.AsOfPoint
	if v := q.Get("as_of"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("as_of %q is not an RFC 3339 time, e.g. 2026-12-02T14:02:00Z", clip(v))})
			return
		}
		point.Time = t
	}
	if v := q.Get("as_of_seq"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("as_of_seq %q must be a stream sequence: 1 or more", clip(v))})
			return
		}
		point.Seq = n
	}
	st, err := b.History.OrderAsOf(r.Context(), id, point)
	var at []string
	if point.Seq > 0 {
		at = append(at, fmt.Sprintf("sequence %d", point.Seq))
	}
	if !point.Time.IsZero() {
		at = append(at, point.Time.Format(time.RFC3339Nano))
	}
	if s.historyError(w, b, id, strings.Join(at, " and "), err) {
		return
	}
	asOf := map[string]any{"events": st.Folded, "complete": st.Complete, "last_seq": st.Last}
	if point.Seq > 0 {
		asOf["seq"] = point.Seq
	}
	if !point.Time.IsZero() {
		asOf["time"] = point.Time
	}
	if st.NotRetained > 0 {
		asOf["not_retained"] = st.NotRetained
	}
	if st.Unindexed > 0 {
		asOf["unindexed"] = st.Unindexed
	}
	// The order's fields, and where they stand.
	body, _ := json.Marshal(st.Order)
	var out map[string]any
	json.Unmarshal(body, &out)
	out["as_of"] = asOf
	writeJSON(w, http.StatusOK, out)
}

// orderDeadLetters serves GET /v1/orders/{id}/dlq.
func (s *Server) orderDeadLetters(w http.ResponseWriter, r *http.Request, b *Backend) {
	if b.History == nil {
		writeJSON(w, http.StatusNotImplemented, map[string]string{"error": "this server keeps no order history"})
		return
	}
	id := r.PathValue("id")
	items, complete, err := b.History.OrderDeadLetters(r.Context(), id)
	if s.historyError(w, b, id, "", err) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"order_id": id, "items": items, "complete": complete})
}

func queryBool(s string) (bool, error) {
	if s == "" {
		return false, nil
	}
	return strconv.ParseBool(s)
}
