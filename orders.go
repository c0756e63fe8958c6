package orderstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/orderstore/orderstore/internal/orderindex"
)

type (
	// OrdersQuery selects a page of orders by status and age: see [Appliance.Orders].
	OrdersQuery = orderindex.Query
	// OrdersPage is one page of orders; its Next continues the listing.
	OrdersPage = orderindex.Page
	// OrderSummary is one order of a listing: id, status, latest event's time and whether stale.
	OrderSummary = orderindex.Entry
	// OrderCount is one status's orders, and how many of them are stale.
	OrderCount = orderindex.Count
)

var (
	// ErrNoOrderIndex is what the order listings answer when processor.order_index is off.
	ErrNoOrderIndex = errors.New("no order index: processor.order_index = false")
	// ErrBadOrdersQuery wraps what is wrong with an [OrdersQuery].
	ErrBadOrdersQuery = orderindex.ErrBadQuery
)

// Orders lists orders by status and by the time of their latest event (q.OlderThan: no event for at
// least that long; q.Stale: past their status's processor.stale_after), oldest first unless
// q.Newest, a page at a time (q.Cursor is the last page's Next). Its cost is O(the page), not
// O(orders): the order index keeps them sorted. The index is computed from the projection bucket,
// so it lists what [Appliance.Order] finds.
//
// At start the index loads the bucket's records: until it has, Orders waits (bounded by ctx).
func (a *Appliance) Orders(ctx context.Context, q OrdersQuery) (OrdersPage, error) {
	if err := a.indexLoaded(ctx, "orders"); err != nil {
		return OrdersPage{}, err
	}
	return a.index.List(q)
}

// OrderCounts returns how many orders are in each status (the largest
// first, with the stale ones of a status that has a stale_after) and the
// total, once the order index has loaded (see [Appliance.Orders]).
func (a *Appliance) OrderCounts(ctx context.Context) ([]OrderCount, int, error) {
	if err := a.indexLoaded(ctx, "order counts"); err != nil {
		return nil, 0, err
	}
	counts, total := a.index.Counts()
	return counts, total, nil
}

func (a *Appliance) indexLoaded(ctx context.Context, what string) error {
	if a.index == nil {
		return ErrNoOrderIndex
	}
	select {
	case <-a.index.Loaded():
		return nil
	case <-a.sup.done: // failed or closed: unless it loaded first, it will not
		select {
		case <-a.index.Loaded():
			return nil
		default:
			return fmt.Errorf("%s: the order index did not load: %w", what, cmp.Or(a.sup.Err(), errors.New("the appliance stopped")))
		}
	case <-ctx.Done():
		return fmt.Errorf("%s: the order index is still loading: %w", what, ctx.Err())
	}
}

// startOrderIndex runs the order index (unless processor.order_index is off): a watch of the
// projection bucket, which loads every record and then follows each write. Its failure fails
// the appliance: the listings would fall behind the projection silently.
func (a *Appliance) startOrderIndex(ctx context.Context) error {
	p := a.cfg.Processor
	if !p.OrderIndex {
		return nil
	}
	kv, err := a.js.KeyValue(ctx, p.ProjectionBucket)
	if err != nil {
		return fmt.Errorf("order index: projection bucket %q: %w", p.ProjectionBucket, err)
	}
	a.index = orderindex.New(p.StaleAfter)
	log := a.log.With("component", "order-index")
	skipped := func(key string, err error) {
		log.Warn("a record of the projection bucket is not an order's; not indexed", "key", key, "err", err)
	}
	a.sup.add(component{name: "order index", run: func(ctx context.Context) error { return a.index.Run(ctx, kv, skipped) }})
	return nil
}
