package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/internal/duration"
)

const ordersUsage = `usage: orderstore orders [flags]
  Lists orders by status and by the time of their latest event, oldest first.
  -status S        only orders in status S
  -older-than D    only orders with no event for at least D (90m, 36h, 7d)
  -stale           only orders past their status's processor.stale_after
  -newest          the most recent first
  -limit N         at most N orders (1..1000; default 100)
  -all             every page, not only the first
  -cursor C        continue a listing where a page ended
  -json            print the API's JSON
  and -admin URL, -token T, -config FILE to reach the admin listener
`

// ordersCmd lists orders by status and age from a running instance's admin API (GET /v1/orders).
func ordersCmd(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("orders", stderr)
	fs.Usage = func() { fmt.Fprint(stderr, ordersUsage) }
	client := clientFlags(fs)
	st := fs.String("status", "", "only orders in this status")
	olderThan := fs.String("older-than", "", "only orders with no event for at least this long (90m, 36h, 7d)")
	stale := fs.Bool("stale", false, "only orders past their status's processor.stale_after")
	newest := fs.Bool("newest", false, "the most recent first")
	limit := fs.Int("limit", 100, "at most this many (1..1000)")
	all := fs.Bool("all", false, "every page")
	cursor := fs.String("cursor", "", "continue a listing where a page ended")
	asJSON := fs.Bool("json", false, "print the API's JSON")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		return usageErr(stderr, "orderstore orders: unexpected argument %q (an order's state: orderstore order ID)\n", fs.Arg(0))
	}
	if *limit < 1 || *limit > 1000 {
		return usageErr(stderr, "orderstore orders: -limit must be 1..1000\n")
	}
	if _, err := duration.ParseAge(*olderThan); *olderThan != "" && err != nil {
		return usageErr(stderr, "orderstore orders: -older-than %v\n", err)
	}
	q := url.Values{"limit": {strconv.Itoa(*limit)}}
	for k, v := range map[string]string{"older_than": *olderThan, "status": *st, "stale": either(*stale, "true", ""), "order": either(*newest, "newest", "")} {
		if v != "" {
			q.Set(k, v)
		}
	}
	c, err := client()
	if err != nil {
		return fail(stderr, exitUsage, err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	now := time.Now()
	listed := 0
	for next := *cursor; ; {
		if next != "" {
			q.Set("cursor", next)
		}
		var page orderstore.OrdersPage
		if err := c.do("GET", "/v1/orders?"+q.Encode(), &page); err != nil {
			tw.Flush()
			return fail(stderr, exitFailure, err)
		}
		if *asJSON {
			printJSON(stdout, page)
		} else {
			if listed == 0 {
				fmt.Fprintln(tw, "ORDER\tSTATUS\tLAST EVENT\tAGO\tSTALE")
			}
			for _, o := range page.Orders {
				at, ago := lastEvent(now, o.LastEventAt)
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", clip(o.OrderID, 256), clip(o.Status, 40), at, ago,
					either(o.Stale, "stale", ""))
			}
		}
		listed += len(page.Orders)
		if page.Next == "" || !*all {
			tw.Flush()
			if page.Next != "" && !*asJSON {
				fmt.Fprintf(stderr, "more: orderstore orders -cursor %s (same filters), or -all\n", page.Next)
			}
			if listed == 0 && !*asJSON {
				fmt.Fprintln(stderr, "no orders listed")
			}
			return exitOK
		}
		next = page.Next
	}
}

// lastEvent is when t (an order's last event) was, and how long before
// now for reading: 45s, 12m, 5h3m, 3d4h; "-" both for none.
func lastEvent(now, t time.Time) (at, ago string) {
	d := now.Sub(t)
	switch {
	case t.IsZero():
		return "-", "-"
	case d < time.Minute:
		ago = fmt.Sprintf("%ds", max(int(d/time.Second), 0))
	case d < time.Hour:
		ago = fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		ago = fmt.Sprintf("%dh%dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	default:
		ago = fmt.Sprintf("%dd%dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
	}
	return t.Format(time.RFC3339), ago
}
