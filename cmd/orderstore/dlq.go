package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/orderstore/orderstore"
)

func dlqCmd(_ context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "list" && args[0] != "replay") {
		return usageErr(stderr, "usage: orderstore dlq list [-from SEQ] [-limit N] [-json] | orderstore dlq replay (SEQ... | -all)\n  both take -admin URL, -token T, -config FILE\n")
	}
	sub := args[0]
	fs := newFlagSet("dlq "+sub, stderr)
	client := clientFlags(fs)
	from := fs.Uint64("from", 1, "list: first dead-letter sequence")
	limit := fs.Int("limit", 100, "list: at most this many")
	asJSON := fs.Bool("json", false, "list: print JSON")
	all := fs.Bool("all", false, "replay: every dead letter")
	if err := fs.Parse(args[1:]); err != nil {
		return exitUsage
	}
	c, err := client()
	if err != nil {
		return fail(stderr, exitUsage, err)
	}
	type page struct {
		Items []orderstore.DeadLetter `json:"items"`
		Next  uint64                  `json:"next"`
	}
	list := func(from uint64, limit int) (p page, err error) {
		err = c.do("GET", fmt.Sprintf("/v1/dlq?from=%d&limit=%d", from, limit), &p)
		return p, err
	}
	switch sub {
	case "list":
		p, err := list(*from, *limit)
		if err != nil {
			return fail(stderr, exitFailure, err)
		}
		if *asJSON {
			printJSON(stdout, p)
			return exitOK
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "SEQ\tSUBJECT\tORIG SEQ\tDELIVERIES\tDEAD-LETTERED\tERROR\tDATA")
		for _, d := range p.Items {
			fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\t%s\t%s\n", d.Sequence, clip(d.Subject, 80), d.OriginalSequence, d.Deliveries,
				d.DeadLetteredAt.Format(time.RFC3339), clip(d.Error, 200), preview(d.Data))
		}
		tw.Flush()
		if p.Next != 0 {
			fmt.Fprintf(stderr, "more: orderstore dlq list -from %d\n", p.Next)
		}
		if len(p.Items) == 0 {
			fmt.Fprintln(stderr, "no dead letters")
		}
		return exitOK
	default: // replay
		var seqs []uint64
		for _, a := range fs.Args() {
			n, err := strconv.ParseUint(a, 10, 64)
			if err != nil || n == 0 {
				return usageErr(stderr, "orderstore dlq replay: %q is not a dead-letter sequence number\n", a)
			}
			seqs = append(seqs, n)
		}
		if *all == (len(seqs) > 0) {
			return usageErr(stderr, "orderstore dlq replay: give SEQ... or -all\n")
		}
		for next := uint64(1); *all && next != 0; { // -all: every page
			p, err := list(next, 1000)
			if err != nil {
				return fail(stderr, exitFailure, err)
			}
			for _, d := range p.Items {
				seqs = append(seqs, d.Sequence)
			}
			next = p.Next
		}
		failed := 0
		for _, seq := range seqs {
			var r struct {
				NewSeq  uint64 `json:"new_seq"`
				Warning string `json:"warning"`
			}
			if err := c.do("POST", fmt.Sprintf("/v1/dlq/%d/replay", seq), &r); err != nil {
				printErr(stderr, err)
				failed++
				continue
			}
			fmt.Fprintf(stdout, "replayed dead letter %d as event %d\n", seq, r.NewSeq)
			if r.Warning != "" {
				fmt.Fprintf(stderr, "warning: dead letter %d: %s\n", seq, r.Warning)
			}
		}
		fmt.Fprintf(stderr, "%d replayed, %d failed\n", len(seqs)-failed, failed)
		return exitIf(failed > 0)
	}
}

// clip shortens s to about n bytes for a table, cut at a character. What a terminal would act on
// (control characters, escape sequences, invalid UTF-8) is shown as Go escapes: a status or type a
// producer wrote must not move the cursor, rewrite lines or set the clipboard of whoever lists it.
func clip(s string, n int) string {
	if strings.IndexFunc(s, func(r rune) bool { return r == utf8.RuneError || !unicode.IsPrint(r) }) >= 0 {
		q := strconv.QuoteToGraphic(s)
		s = q[1 : len(q)-1]
	}
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// preview is the start of an event's payload, on one line and safe for a terminal (clip).
func preview(b []byte) string {
	return clip(string(bytes.ReplaceAll(b, []byte("\n"), []byte(" "))), 60)
}
