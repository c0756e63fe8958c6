// Package orderindex keeps the projection's orders by status and by the time of their latest event,
// in memory, so that "which orders are paid but not shipped?" and "which have had no event for a
// day?" cost O(result), not O(orders). It is computed from the projection bucket by a watch
// ([Index.Run]), so it holds exactly what the projection holds (docs/processor.md, "Orders by
// status, and stale orders": "How it works").
package orderindex

import (
	"cmp"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/btree"
)

// MaxLimit is the most orders one page lists.
const MaxLimit = 1000

// MaxStaleStatuses bounds processor.stale_after's entries: each is a
// metric series and a source every stale listing merges.
const MaxStaleStatuses = 64

// Entry is one order as the index has it.
type Entry struct {
	OrderID     string    `json:"order_id"`
	Status      string    `json:"status"`
	LastEventAt time.Time `json:"last_event_at"`
	// Stale: its status has a stale_after, and its latest event is older.
	Stale bool `json:"stale,omitempty"`
}

// Query selects and orders a page of orders.
type Query struct {
	// Status, if set, is the only status listed.
	Status string
	// OlderThan, if set, lists only orders whose latest event is at least this old.
	OlderThan time.Duration
	// Stale lists only the orders past their status's stale_after.
	Stale bool
	// Newest lists the most recent latest events first, not the oldest (those waiting longest).
	Newest bool
	// Limit is the page size: 1 to MaxLimit; 0 is 100.
	Limit int
	// Cursor continues a listing: a page's Next.
	Cursor string
}

// Page is one page of a listing.
type Page struct {
	Orders []Entry `json:"orders"`
	// Next continues the listing (Query.Cursor); "" when it is done.
	Next string `json:"next,omitempty"`
}

// ErrBadQuery wraps what is wrong with a Query.
var ErrBadQuery = errors.New("bad order query")

// item is an order's place in a tree: by the time of its latest event, then by id.
type item struct {
	at int64 // LastEventAt, unix nanoseconds
	id string
}

func compareItems(a, b item) int {
	return cmp.Or(cmp.Compare(a.at, b.at), strings.Compare(a.id, b.id))
}

func newTree() *btree.BTreeG[item] {
	return btree.NewG(32, func(a, b item) bool { return compareItems(a, b) < 0 })
}

// place is an order's time in the trees and its status's set (which
// holds the status: one copy of each status, however many orders have it).
type place struct {
	at  int64
	set *statusSet
}

// statusSet is one status's orders, with the count of those stale.
type statusSet struct {
	name string
	tree *btree.BTreeG[item]
	// staleAfter is the status's stale_after (0: none). stale counts the items at or before
	// staleAt, the threshold last counted against: a write adjusts it, and a later count walks only
	// the items between the old threshold and the new one.
	staleAfter time.Duration
	staleAt    int64
	stale      int
}

// Index is the orders by status and latest event. It is safe for concurrent use.
type Index struct {
	mu         sync.RWMutex
	byID       map[string]place // where each order is
	all        *btree.BTreeG[item]
	by         map[string]*statusSet
	staleAfter map[string]time.Duration
	now        func() time.Time
	loaded     chan struct{} // closed once the watch read what the bucket held (listings are complete)
	loadOnce   sync.Once
	applied    atomic.Uint64 // the bucket sequence (revision) of the last write read
}

// New returns an empty index. staleAfter maps a status to how long an order
// may stay in it without an event before it counts as stale.
func New(staleAfter map[string]time.Duration) *Index {
	return &Index{byID: map[string]place{}, all: newTree(), by: map[string]*statusSet{},
		staleAfter: staleAfter, now: time.Now, loaded: make(chan struct{})}
}

// Applied is the bucket sequence of the last write the index read: the bucket's last sequence
// minus it is the writes the listings and counts do not reflect yet.
func (x *Index) Applied() uint64 { return x.applied.Load() }

// Loaded is closed once the index holds every order the bucket held when its watch began.
func (x *Index) Loaded() <-chan struct{} { return x.loaded }

// Put records an order's status and the time of its latest event.
func (x *Index) Put(id, status string, lastEventAt time.Time) {
	at := nanos(lastEventAt)
	x.mu.Lock()
	defer x.mu.Unlock()
	if old, ok := x.byID[id]; ok {
		if old.at == at && old.set.name == status {
			return
		}
		x.removeLocked(id, old)
	}
	s := x.by[status]
	if s == nil {
		s = &statusSet{name: status, tree: newTree(), staleAfter: x.staleAfter[status]}
		if s.staleAfter > 0 {
			s.staleAt = x.now().Add(-s.staleAfter).UnixNano()
		}
		x.by[status] = s
	}
	it := item{at: at, id: id}
	x.byID[id] = place{at: at, set: s}
	x.all.ReplaceOrInsert(it)
	s.tree.ReplaceOrInsert(it)
	if s.staleAfter > 0 && at <= s.staleAt {
		s.stale++
	}
}

// Remove forgets an order (its key was deleted or purged).
func (x *Index) Remove(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if old, ok := x.byID[id]; ok {
		x.removeLocked(id, old)
	}
}

func (x *Index) removeLocked(id string, old place) {
	delete(x.byID, id)
	it := item{at: old.at, id: id}
	x.all.Delete(it)
	s := old.set
	s.tree.Delete(it)
	if s.staleAfter > 0 && old.at <= s.staleAt {
		s.stale--
	}
	if s.tree.Len() == 0 {
		delete(x.by, s.name)
	}
}

// Len is how many orders the index holds.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.all.Len()
}

// Count is one status's orders, and how many of them are stale.
type Count struct {
	Status string `json:"status"`
	Orders int    `json:"orders"`
	// Stale is set only for a status with a stale_after.
	Stale *int `json:"stale,omitempty"`
}

// Counts returns the orders per status, the largest first (ties by status); and the total.
func (x *Index) Counts() (counts []Count, total int) {
	x.mu.Lock() // stale counts move their threshold
	defer x.mu.Unlock()
	now := x.now()
	for _, s := range x.by {
		counts = append(counts, s.count(now))
	}
	slices.SortFunc(counts, func(a, b Count) int {
		return cmp.Or(cmp.Compare(b.Orders, a.Orders), strings.Compare(a.Status, b.Status))
	})
	return counts, x.all.Len()
}

// Top returns the n largest statuses as Counts does, and what the others hold: their orders and how
// many statuses they are. It costs O(statuses × log n), not a sort of every status: a producer that
// writes a new status per order must not make every /v1/status poll sort them all.
func (x *Index) Top(n int) (top []Count, total, otherOrders, otherStatuses int) {
	x.mu.Lock() // stale counts move their threshold
	defer x.mu.Unlock()
	now := x.now()
	// smaller orders sets the reverse of Counts' order: fewer orders
	// first, then by status from the last.
	smaller := func(a, b *statusSet) int {
		return cmp.Or(cmp.Compare(a.tree.Len(), b.tree.Len()), strings.Compare(b.name, a.name))
	}
	// best holds the n largest so far, the smallest of them first.
	var best []*statusSet
	for _, s := range x.by {
		i, _ := slices.BinarySearchFunc(best, s, smaller)
		if best = slices.Insert(best, i, s); len(best) > n { // the smallest of n+1 is another
			otherOrders += best[0].tree.Len()
			otherStatuses++
			best = best[1:]
		}
	}
	for i := len(best) - 1; i >= 0; i-- {
		top = append(top, best[i].count(now))
	}
	return top, x.all.Len(), otherOrders, otherStatuses
}

// Stale returns, for each status with a stale_after, how many of its
// orders had no event for longer (0 for a status no order has).
func (x *Index) Stale() map[string]int {
	x.mu.Lock()
	defer x.mu.Unlock()
	now := x.now()
	out := make(map[string]int, len(x.staleAfter))
	for status := range x.staleAfter {
		out[status] = 0
		if s := x.by[status]; s != nil {
			out[status] = s.countStale(now)
		}
	}
	return out
}

// count is s's Count, its stale count moved to now.
func (s *statusSet) count(now time.Time) Count {
	c := Count{Status: s.name, Orders: s.tree.Len()}
	if s.staleAfter > 0 {
		c.Stale = new(s.countStale(now))
	}
	return c
}

// countStale moves s's threshold to now and returns the stale count: it walks only the items
// between the old threshold and the new one (all of them again if the clock went back).
func (s *statusSet) countStale(now time.Time) int {
	at := now.Add(-s.staleAfter).UnixNano()
	switch {
	case at > s.staleAt:
		s.tree.AscendRange(item{at: s.staleAt + 1}, item{at: at + 1}, func(item) bool { s.stale++; return true })
	case at < s.staleAt:
		s.stale = 0
		s.tree.AscendLessThan(item{at: at + 1}, func(item) bool { s.stale++; return true })
	}
	s.staleAt = at
	return s.stale
}

const maxAt = math.MaxInt64

// Times as unix nanoseconds, clamped to what they can count: a record without a latest event (the
// zero time) sorts first and reads back as the zero time.
var (
	minTime = time.Unix(0, math.MinInt64+1)
	maxTime = time.Unix(0, maxAt-1)
)

func nanos(t time.Time) int64 {
	switch {
	case t.Before(minTime):
		return math.MinInt64
	case t.After(maxTime):
		return maxAt - 1
	}
	return t.UnixNano()
}

// source is one tree a listing reads, up to a time bound (inclusive).
type source struct {
	tree  *btree.BTreeG[item]
	bound int64
}

// List returns one page of the orders q selects.
func (x *Index) List(q Query) (Page, error) {
	if err := q.check(); err != nil {
		return Page{}, err
	}
	limit := cmp.Or(q.Limit, 100)
	var cur *item
	if q.Cursor != "" {
		c, err := decodeCursor(q.Cursor)
		if err != nil {
			return Page{}, err
		}
		cur = &c
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	now := x.now()
	bound := int64(maxAt)
	if q.OlderThan > 0 {
		bound = now.Add(-q.OlderThan).UnixNano()
	}
	var srcs []source
	switch {
	case q.Stale:
		for status, d := range x.staleAfter {
			if s := x.by[status]; s != nil && (q.Status == "" || q.Status == status) {
				srcs = append(srcs, source{s.tree, min(bound, now.Add(-d).UnixNano())})
			}
		}
	case q.Status != "":
		if s := x.by[q.Status]; s != nil {
			srcs = append(srcs, source{s.tree, bound})
		}
	default:
		srcs = append(srcs, source{x.all, bound})
	}
	// Up to limit+1 from each source, merged: the extra one says whether there is a next page.
	var items []item
	for _, src := range srcs {
		items = append(items, take(src, cur, q.Newest, limit+1)...)
	}
	slices.SortFunc(items, compareItems) // an order is in one source only
	if q.Newest {
		slices.Reverse(items)
	}
	var p Page
	if len(items) > limit {
		items = items[:limit]
		p.Next = encodeCursor(items[limit-1])
	}
	p.Orders = make([]Entry, len(items))
	for i, it := range items {
		status := x.byID[it.id].set.name
		d := x.staleAfter[status]
		p.Orders[i] = Entry{OrderID: it.id, Status: status, Stale: d > 0 && it.at <= now.Add(-d).UnixNano()}
		if it.at != math.MinInt64 { // else the zero time
			p.Orders[i].LastEventAt = time.Unix(0, it.at).UTC()
		}
	}
	return p, nil
}

// take reads up to n items of src past the cursor, in the listing's order.
func take(src source, cur *item, newest bool, n int) []item {
	var out []item
	visit := func(it item) bool {
		if it.at > src.bound {
			return false // ascending: past the bound
		}
		out = append(out, it)
		return len(out) < n
	}
	switch {
	case !newest && cur == nil:
		src.tree.Ascend(visit)
	case !newest:
		// The successor of the cursor: the same time, the next id.
		src.tree.AscendGreaterOrEqual(item{at: cur.at, id: cur.id + "\x00"}, visit)
	case cur != nil && cur.at <= src.bound:
		src.tree.DescendLessOrEqual(*cur, func(it item) bool { return it == *cur || visit(it) })
	case src.bound == maxAt:
		src.tree.Descend(visit)
	default:
		src.tree.DescendLessOrEqual(item{at: src.bound + 1}, func(it item) bool { return it.at > src.bound || visit(it) })
	}
	return out
}

func (q Query) check() error {
	var errs []error
	if q.Limit < 0 || q.Limit > MaxLimit {
		errs = append(errs, fmt.Errorf("limit %d: want 1 to %d", q.Limit, MaxLimit))
	}
	if q.OlderThan < 0 {
		errs = append(errs, fmt.Errorf("older_than %s: want a positive duration", q.OlderThan))
	}
	if len(q.Status) > 256 {
		errs = append(errs, fmt.Errorf("status is %d bytes, more than 256", len(q.Status)))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrBadQuery, err)
	}
	return nil
}

// A cursor is the last item of a page: its time and its id, in URL-safe
// base64 so that it passes through a query string as it is.
func encodeCursor(it item) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(it.at, 10) + " " + it.id))
}

func decodeCursor(s string) (item, error) {
	bad := fmt.Errorf("%w: cursor %.40q is not one a page gave", ErrBadQuery, s)
	if len(s) > 512 {
		return item{}, bad
	}
	b, derr := base64.RawURLEncoding.DecodeString(s)
	at, id, ok := strings.Cut(string(b), " ")
	n, err := strconv.ParseInt(at, 10, 64)
	if derr != nil || !ok || err != nil || id == "" {
		return item{}, bad
	}
	return item{at: n, id: id}, nil
}
