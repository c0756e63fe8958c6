package admin

import (
	"cmp"
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

// History reads an order's story through the projection's history index. Unknown orders match
// Backend.NotFound; processor.ErrNotRetained and processor.ErrNoHistory are answered 410 and 501.
type History interface {
	OrderEvents(ctx context.Context, id string, from, limit int) (processor.HistoryPage, error)
	OrderEventStates(ctx context.Context, id string, from, limit int) (processor.HistoryPage, error)
	OrderAsOf(ctx context.Context, id string, point processor.AsOfPoint) (processor.AsOfState, error)
	// OrderDeadLetters returns the order's dead letters among the latest (complete: all were read).
	OrderDeadLetters(ctx context.Context, id string) (items []processor.DeadLetter, complete bool, err error)
}

// historyError answers err of a history call (nil for nil); asOf is the point asked for, if any.
func historyError(b *Backend, id, asOf string, err error) error {
	switch {
	case err == nil:
		return nil
	case b.isNotFound(err) && asOf != "":
		return errorf(http.StatusNotFound, "order %q had no event as of %s (or is not known)", clip(id), asOf)
	case b.isNotFound(err):
		return errorf(http.StatusNotFound, "order %q not found", clip(id))
	case errors.Is(err, processor.ErrNotRetained):
		return &apiError{http.StatusGone, err.Error(),
			"the stream's retention (stream.max_age, max_bytes, max_msgs) removed the order's events up to that point; ask for a later point"}
	case errors.Is(err, processor.ErrNoHistory):
		return &apiError{http.StatusNotImplemented, err.Error(),
			"the history index is kept by the built-in projection, within processor.history_max_bytes"}
	}
	return err
}

// errNoHistory answers for history when the backend has none.
var errNoHistory = &apiError{code: http.StatusNotImplemented, msg: "this server keeps no order history"}

// orderEvents serves GET /v1/orders/{id}/events?from=&limit=&states=.
func (s *Server) orderEvents(w http.ResponseWriter, r *http.Request, b *Backend) error {
	if b.History == nil {
		return errNoHistory
	}
	id := r.PathValue("id")
	q := r.URL.Query()
	from, err := queryInt(q.Get("from"), 0)
	if err != nil || from < 0 {
		return errorf(http.StatusBadRequest, "from must be a position in the order's history: 0 or more")
	}
	limit, err := queryInt(q.Get("limit"), 100)
	if err != nil || limit < 1 || limit > processor.MaxHistoryPage {
		return errorf(http.StatusBadRequest, "limit must be 1..%d", processor.MaxHistoryPage)
	}
	read := b.History.OrderEvents
	if states, err := strconv.ParseBool(cmp.Or(q.Get("states"), "false")); err != nil {
		return errorf(http.StatusBadRequest, "states must be true or false")
	} else if states {
		read = b.History.OrderEventStates
	}
	page, err := read(r.Context(), id, from, limit)
	if err != nil {
		return historyError(b, id, "", err)
	}
	out := status.OrderEvents{OrderID: page.OrderID, Total: page.Total, Unindexed: page.Unindexed, From: page.From, Next: page.Next,
		Events: make([]status.OrderEvent, len(page.Events))}
	for i, e := range page.Events {
		h := status.OrderEvent{Position: e.Position, Seq: e.Sequence, Retained: e.Retained, Replaced: e.Replaced, Edge: e.Edge,
			Subject: e.Subject, Type: e.Type, Headers: e.Header, State: e.State}
		if e.Retained {
			h.Time = &e.Time
			if json.Valid(e.Data) {
				h.Data = e.Data
			} else {
				h.DataBase64 = base64.StdEncoding.EncodeToString(e.Data)
			}
		}
		out.Events[i] = h
	}
	return writeResult(w, http.StatusOK, out, nil)
}

// orderAsOf serves GET /v1/orders/{id}?as_of=RFC3339&as_of_seq=N.
func (s *Server) orderAsOf(w http.ResponseWriter, r *http.Request, b *Backend) error {
	if b.History == nil {
		return errNoHistory
	}
	id := r.PathValue("id")
	q := r.URL.Query()
	var point processor.AsOfPoint
	var err error
	if v := q.Get("as_of"); v != "" {
		if point.Time, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return errorf(http.StatusBadRequest, "as_of %q is not an RFC 3339 time, e.g. 2026-12-02T14:02:00Z", clip(v))
		}
	}
	if v := q.Get("as_of_seq"); v != "" {
		if point.Seq, err = strconv.ParseUint(v, 10, 64); err != nil || point.Seq == 0 {
			return errorf(http.StatusBadRequest, "as_of_seq %q must be a stream sequence: 1 or more", clip(v))
		}
	}
	// The point asked for, in an error and in the answer.
	var at []string
	asOf := map[string]any{}
	if point.Seq > 0 {
		at, asOf["seq"] = append(at, fmt.Sprintf("sequence %d", point.Seq)), point.Seq
	}
	if !point.Time.IsZero() {
		at, asOf["time"] = append(at, point.Time.Format(time.RFC3339Nano)), point.Time
	}
	st, err := b.History.OrderAsOf(r.Context(), id, point)
	if err != nil {
		return historyError(b, id, strings.Join(at, " and "), err)
	}
	asOf["events"], asOf["complete"], asOf["last_seq"] = st.Folded, st.Complete, st.Last
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
	return writeResult(w, http.StatusOK, out, nil)
}

// orderDeadLetters serves GET /v1/orders/{id}/dlq.
func (s *Server) orderDeadLetters(w http.ResponseWriter, r *http.Request, b *Backend) error {
	if b.History == nil {
		return errNoHistory
	}
	id := r.PathValue("id")
	items, complete, err := b.History.OrderDeadLetters(r.Context(), id)
	return writeResult(w, http.StatusOK, map[string]any{"order_id": id, "items": items, "complete": complete}, historyError(b, id, "", err))
}
