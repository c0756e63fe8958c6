package admin

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/orderstore/orderstore/internal/duration"
	"github.com/orderstore/orderstore/internal/orderindex"
	"github.com/orderstore/orderstore/status"
)

// ordersParams are GET /v1/orders's query parameters.
var ordersParams = []string{"status", "older_than", "stale", "order", "limit", "cursor"}

// ordersList serves GET /v1/orders: a page of orders by status and age, from the order index.
func (s *Server) ordersList(w http.ResponseWriter, r *http.Request, b *Backend) error {
	q, err := ordersQuery(r.URL.Query())
	if err != nil {
		return errorf(http.StatusBadRequest, "%s", err)
	}
	x := b.OrderIndex
	if x == nil {
		return errorf(http.StatusNotImplemented, "no order index: processor.order_index is false")
	}
	select {
	case <-x.Loaded():
	default:
		w.Header().Set("Retry-After", "1")
		return errorf(http.StatusServiceUnavailable, "the order index is loading the projection (%d orders so far): retry in a moment", x.Len())
	}
	page, err := x.List(q)
	if errors.Is(err, orderindex.ErrBadQuery) {
		return errorf(http.StatusBadRequest, "%s", err)
	}
	if err == nil && page.Orders == nil {
		page.Orders = []orderindex.Entry{}
	}
	return writeResult(w, http.StatusOK, page, err)
}

// ordersQuery reads GET /v1/orders's parameters; an unknown one is an
// error (a misspelt filter must not list everything).
func ordersQuery(v url.Values) (orderindex.Query, error) {
	q := orderindex.Query{Status: v.Get("status"), Cursor: v.Get("cursor")}
	var errs []error
	for k := range v {
		if !slices.Contains(ordersParams, k) {
			errs = append(errs, fmt.Errorf("unknown parameter %.40q (known: %s)", k, strings.Join(ordersParams, ", ")))
		}
	}
	var err error
	if s := v.Get("older_than"); s != "" {
		if q.OlderThan, err = duration.ParseAge(s); err != nil {
			errs = append(errs, fmt.Errorf("older_than: %w", err))
		}
	}
	if q.Stale, err = strconv.ParseBool(cmp.Or(v.Get("stale"), "false")); err != nil {
		errs = append(errs, fmt.Errorf("stale %.20q: want true or false", v.Get("stale")))
	}
	switch o := v.Get("order"); o {
	case "", "oldest":
	case "newest":
		q.Newest = true
	default:
		errs = append(errs, fmt.Errorf("order %.20q: want oldest or newest", o))
	}
	if q.Limit, err = queryInt(v.Get("limit"), 100); err != nil || q.Limit < 1 || q.Limit > orderindex.MaxLimit {
		errs = append(errs, fmt.Errorf("limit must be 1..%d", orderindex.MaxLimit))
	}
	return q, errors.Join(errs...)
}

// ordersStatus counts orders by status: the MaxOrderStatuses largest, the rest as "other".
func ordersStatus(x *orderindex.Index, staleAfter map[string]time.Duration) *status.OrdersStatus {
	st := &status.OrdersStatus{Statuses: []status.OrderCount{}}
	select {
	case <-x.Loaded():
	default:
		st.Loading, st.Total = true, x.Len()
		return st
	}
	top, total, other, others := x.Top(status.MaxOrderStatuses)
	st.Statuses = append(st.Statuses, top...)
	st.Total, st.Other, st.OtherStatuses = total, other, others
	if len(staleAfter) > 0 {
		st.Stale = x.Stale()
		st.StaleAfter = make(map[string]string, len(staleAfter))
		for s, d := range staleAfter {
			st.StaleAfter[s] = duration.Format(d)
		}
	}
	return st
}
