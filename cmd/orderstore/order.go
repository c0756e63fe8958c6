package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/orderstore/orderstore/status"
)

const orderUsage = `usage: orderstore order [flags] ID
  ID alone prints the order's current state (the projection).
  -events          its events, oldest first (-from POS, -limit N, -all; -states adds the state after each)
  -as-of WHEN      its state as of WHEN: an RFC 3339 time (2026-12-02T14:02:00Z) or a stream sequence
  -json            print the API's JSON
  and -admin URL, -token T, -config FILE to reach the admin listener
`

// orderCmd prints an order's state, history or past state, via a running instance's admin API.
func orderCmd(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("order", stderr)
	fs.Usage = func() { fmt.Fprint(stderr, orderUsage) }
	client := clientFlags(fs)
	events := fs.Bool("events", false, "list the order's events")
	from := fs.Int("from", 0, "events: first position (0 is the order's first event)")
	limit := fs.Int("limit", 100, "events: at most this many (1..1000)")
	all := fs.Bool("all", false, "events: every event, page by page")
	states := fs.Bool("states", false, "events: the order's state after each")
	asOf := fs.String("as-of", "", "state as of an RFC 3339 time or a stream sequence")
	asJSON := fs.Bool("json", false, "print JSON")
	// Flags may come before or after the id.
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	var id string
	if fs.NArg() > 0 {
		id = fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return exitUsage
		}
	}
	if id == "" || fs.NArg() > 0 {
		return usageErr(stderr, "%s", orderUsage)
	}
	if *events && *asOf != "" {
		return usageErr(stderr, "orderstore order: -events and -as-of do not go together\n")
	}
	if *limit < 1 || *limit > 1000 || *from < 0 {
		return usageErr(stderr, "orderstore order: -limit must be 1..1000 and -from 0 or more\n")
	}
	q := url.Values{}
	if *asOf != "" {
		if n, err := strconv.ParseUint(*asOf, 10, 64); err == nil {
			q.Set("as_of_seq", strconv.FormatUint(n, 10))
		} else if _, err := time.Parse(time.RFC3339Nano, *asOf); err == nil {
			q.Set("as_of", *asOf)
		} else {
			return usageErr(stderr, "orderstore order: -as-of %q is neither an RFC 3339 time (2026-12-02T14:02:00Z) nor a stream sequence\n", *asOf)
		}
	}
	c, err := client()
	if err != nil {
		return fail(stderr, exitUsage, err)
	}
	path := "/v1/orders/" + url.PathEscape(id)
	if !*events {
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
		var o map[string]any
		if err := c.do("GET", path, &o); err != nil {
			return fail(stderr, exitFailure, err)
		}
		printOrder(stdout, o, *asJSON)
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	for pos := *from; ; {
		q.Set("from", strconv.Itoa(pos))
		q.Set("limit", strconv.Itoa(*limit))
		if *states {
			q.Set("states", "true")
		}
		var page status.OrderEvents
		if err := c.do("GET", path+"/events?"+q.Encode(), &page); err != nil {
			tw.Flush()
			return fail(stderr, exitFailure, err)
		}
		if !*asJSON && pos == *from {
			fmt.Fprintln(tw, "POS\tSEQ\tTIME\tTYPE\tEDGE\tSTATUS AFTER\tDATA")
		}
		if *asJSON {
			printJSON(stdout, page)
		} else {
			for _, e := range page.Events {
				fmt.Fprintln(tw, eventRow(e))
			}
		}
		if page.Unindexed > 0 && pos == *from && !*asJSON {
			defer fmt.Fprintf(stderr, "%d earlier events of this order predate the history index and are not listed\n", page.Unindexed)
		}
		if page.Next == 0 || !*all {
			tw.Flush()
			if page.Next != 0 {
				fmt.Fprintf(stderr, "more: orderstore order -events -from %d %s (or -all)\n", page.Next, id)
			}
			if page.Total == 0 && !*asJSON {
				fmt.Fprintln(stderr, "no events listed")
			}
			return exitOK
		}
		pos = page.Next
	}
}

// eventRow is one event as a line of the -events table.
func eventRow(e status.OrderEvent) string {
	if !e.Retained {
		return fmt.Sprintf("%d\t%d\t-\t-\t\t\t(no longer retained)", e.Position, e.Seq)
	}
	var compact bytes.Buffer
	json.Compact(&compact, e.Data) // the API indents it
	data := preview(compact.Bytes())
	if e.DataBase64 != "" {
		b, _ := base64.StdEncoding.DecodeString(e.DataBase64)
		data = preview(b)
	}
	if e.Replaced {
		data = "(lost: the stream holds another event at this sequence) " + data
	}
	var status, t string
	if e.State != nil {
		status = e.State.Status
	}
	if e.Time != nil {
		t = e.Time.Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("%d\t%d\t%s\t%s\t%s\t%s\t%s", e.Position, e.Seq, t, clip(e.Type, 40), e.Edge, clip(status, 40), data)
}

// printOrder prints an order (with "as_of" when asked as of a point).
func printOrder(w io.Writer, o map[string]any, asJSON bool) {
	if asJSON {
		printJSON(w, o)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, k := range []string{"order_id", "status", "last_event", "events", "first_seq", "last_seq", "first_event_at", "last_event_at", "updated_at"} {
		if v, ok := o[k]; ok {
			fmt.Fprintf(tw, "%s\t%s\n", k, clip(value(v), 2048)) // a producer's status, never acted on
		}
	}
	if a, ok := o["as_of"].(map[string]any); ok {
		line := fmt.Sprintf("the fold of %s events up to sequence %s", value(a["events"]), value(a["last_seq"]))
		if a["complete"] != true {
			line += fmt.Sprintf("; INCOMPLETE: %s events no longer retained, %s older than the history index", value(cmp.Or(a["not_retained"], any(0.0))), value(cmp.Or(a["unindexed"], any(0.0))))
		}
		fmt.Fprintf(tw, "as_of\t%s\n", line)
	}
	tw.Flush()
}

// value is a JSON value as printed: a number whole (a sequence of 1,200,000 is not 1.2e+06).
func value(v any) string {
	if f, ok := v.(float64); ok {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}
