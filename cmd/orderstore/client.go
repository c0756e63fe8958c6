package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/orderstore/orderstore/admin"
	"github.com/orderstore/orderstore/bootstrap"
	"github.com/orderstore/orderstore/processor"
)

// adminClient talks to a running orderstore's admin API.
type adminClient struct {
	base  string
	token string
	hc    *http.Client
}

// clientFlags adds -admin, -token and -config to fs; resolve() picks, in
// order: the flags, $ORDERSTORE_ADMIN_URL / $ORDERSTORE_ADMIN_TOKEN, the
// config file's [admin] section, the built-in default.
func clientFlags(fs *flag.FlagSet) func() (*adminClient, error) {
	url := fs.String("admin", "", "admin URL (default: $ORDERSTORE_ADMIN_URL, else from -config, else http://127.0.0.1:8222)")
	token := fs.String("token", "", "admin bearer token (default: $ORDERSTORE_ADMIN_TOKEN, else from -config)")
	configPath := fs.String("config", "", "read [admin] listen and token from this config file (default: $ORDERSTORE_CONFIG)")
	return func() (*adminClient, error) {
		c := &adminClient{base: *url, token: *token, hc: &http.Client{Timeout: 30 * time.Second}}
		if c.base == "" {
			c.base = os.Getenv("ORDERSTORE_ADMIN_URL")
		}
		if c.token == "" {
			c.token = os.Getenv("ORDERSTORE_ADMIN_TOKEN")
		}
		if c.base == "" || c.token == "" {
			cfg, _, err := loadConfig(*configPath)
			if err != nil {
				return nil, err
			}
			if c.base == "" {
				if cfg.Admin.Listen == "" {
					return nil, withHint(errors.New("the admin listener is disabled in the config (admin.listen = \"\")"), "pass -admin URL")
				}
				host, port, _ := net.SplitHostPort(cfg.Admin.Listen)
				if host == "" || host == "0.0.0.0" || host == "::" {
					host = "127.0.0.1"
				}
				c.base = "http://" + net.JoinHostPort(host, port)
			}
			if c.token == "" {
				if c.token, err = cfg.AdminToken(); err != nil {
					return nil, err
				}
			}
		}
		c.base = strings.TrimRight(c.base, "/")
		return c, nil
	}
}

func (c *adminClient) do(method, path string, out any) error {
	req, err := http.NewRequest(method, c.base+path, nil)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return withHint(fmt.Errorf("admin %s: %w", c.base, err), "is orderstore running? pass -admin URL (or -config FILE) to reach its admin listener")
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusUnauthorized {
		return withHint(fmt.Errorf("admin %s%s: 401 unauthorized", c.base, path), "pass -token, set $ORDERSTORE_ADMIN_TOKEN, or -config with admin.token")
	}
	if resp.StatusCode >= 300 && resp.StatusCode != http.StatusServiceUnavailable {
		var e struct{ Error string }
		json.Unmarshal(body, &e)
		if e.Error == "" {
			e.Error = strings.TrimSpace(string(body))
		}
		return fmt.Errorf("admin %s %s: %s: %s", method, path, resp.Status, e.Error)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("admin %s %s: %s: %w", method, path, resp.Status, err)
	}
	return nil
}

func statusCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	client := clientFlags(fs)
	asJSON := fs.Bool("json", false, "print the raw JSON of /v1/status")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	c, err := client()
	if err != nil {
		printErr(stderr, err)
		return exitUsage
	}
	var st admin.Status
	if err := c.do("GET", "/v1/status", &st); err != nil {
		printErr(stderr, err)
		return exitFailure
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(st)
		return exitOK
	}
	printStatus(stdout, st)
	if st.Status != "ready" {
		return exitFailure
	}
	return exitOK
}

func printStatus(w io.Writer, st admin.Status) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "orderstore %s\t%s (nats-server %s)\n", st.Status, st.Build.Version, st.Build.NATSServer)
	fmt.Fprintf(tw, "durability\tsync_interval = %s: %s\n", st.Durability["sync_interval"], st.Durability["description"])
	s := st.Stream
	fmt.Fprintf(tw, "stream %s\t%d events, seq %d..%d\n", s.Name, s.Messages, s.FirstSeq, s.LastSeq)
	fmt.Fprintf(tw, "  size\t%s of max_bytes %s (%.1f%%)\n", bootstrap.FormatBytes(int64(s.Bytes)), bootstrap.FormatBytes(s.MaxBytes), s.BytesPercent)
	maxAge := "forever"
	if s.MaxAgeSeconds > 0 {
		maxAge = (time.Duration(s.MaxAgeSeconds) * time.Second).String()
	}
	fmt.Fprintf(tw, "  oldest event\t%s old, max_age %s\n", (time.Duration(s.OldestAgeSeconds) * time.Second).String(), maxAge)
	if c := st.Consumer; c != nil {
		fmt.Fprintf(tw, "consumer %s\t%d unprocessed (%d pending, %d awaiting ack), %.1fs behind, %d redelivered, ack floor %d\n",
			c.Name, c.Pending+uint64(c.AckPending), c.Pending, c.AckPending, c.SecondsBehind, c.Redelivered, c.AckFloor)
	}
	if p := st.Processor; p != nil {
		state := "running"
		if !p.Running {
			state = "stopped"
		}
		fmt.Fprintf(tw, "processor\t%s: %d processed, %d retrying, %d dead-lettered (%d poison), %d duplicates skipped\n",
			state, p.Processed, p.Failed, p.DeadLettered, p.Poison, p.Duplicates)
	} else {
		fmt.Fprintf(tw, "processor\tdisabled\n")
	}
	fmt.Fprintf(tw, "dead letters\t%d in %s\n", st.DeadLetters.Messages, st.DeadLetters.Stream)
	fmt.Fprintf(tw, "store\t%s, %s free\n", st.Store.Dir, bootstrap.FormatBytes(int64(st.Store.FreeBytes)))
	for _, c := range st.Checks {
		if !c.OK {
			fmt.Fprintf(tw, "not ready\t%s: %s\n", c.Name, c.Reason)
		}
	}
	for _, e := range st.Errors {
		fmt.Fprintf(tw, "error\t%s\n", e)
	}
	tw.Flush()
}

func dlqCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "list" && args[0] != "replay") {
		fmt.Fprint(stderr, "usage: orderstore dlq list [-from SEQ] [-limit N] [-json] | orderstore dlq replay (SEQ... | -all)\n  both take -admin URL, -token T, -config FILE\n")
		return exitUsage
	}
	sub := args[0]
	fs := flag.NewFlagSet("dlq "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
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
		printErr(stderr, err)
		return exitUsage
	}
	type page struct {
		Items []processor.DeadLetter `json:"items"`
		Next  uint64                 `json:"next"`
	}
	list := func(from uint64, limit int) (page, error) {
		var p page
		err := c.do("GET", fmt.Sprintf("/v1/dlq?from=%d&limit=%d", from, limit), &p)
		return p, err
	}
	switch sub {
	case "list":
		p, err := list(*from, *limit)
		if err != nil {
			printErr(stderr, err)
			return exitFailure
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			enc.Encode(p)
			return exitOK
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "SEQ\tSUBJECT\tORIG SEQ\tDELIVERIES\tDEAD-LETTERED\tERROR\tDATA")
		for _, d := range p.Items {
			fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\t%s\t%s\n", d.Sequence, d.Subject, d.OriginalSequence, d.Deliveries,
				d.DeadLetteredAt.Format(time.RFC3339), d.Error, preview(d.Data))
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
				fmt.Fprintf(stderr, "orderstore dlq replay: %q is not a dead-letter sequence number\n", a)
				return exitUsage
			}
			seqs = append(seqs, n)
		}
		if *all == (len(seqs) > 0) {
			fmt.Fprintln(stderr, "orderstore dlq replay: give SEQ... or -all")
			return exitUsage
		}
		if *all {
			for next := uint64(1); ; {
				p, err := list(next, 1000)
				if err != nil {
					printErr(stderr, err)
					return exitFailure
				}
				for _, d := range p.Items {
					seqs = append(seqs, d.Sequence)
				}
				if p.Next == 0 {
					break
				}
				next = p.Next
			}
		}
		failed := 0
		for _, seq := range seqs {
			var r struct {
				NewSeq uint64 `json:"new_seq"`
			}
			if err := c.do("POST", fmt.Sprintf("/v1/dlq/%d/replay", seq), &r); err != nil {
				printErr(stderr, err)
				failed++
				continue
			}
			fmt.Fprintf(stdout, "replayed dead letter %d as event %d\n", seq, r.NewSeq)
		}
		fmt.Fprintf(stderr, "%d replayed, %d failed\n", len(seqs)-failed, failed)
		if failed > 0 {
			return exitFailure
		}
		return exitOK
	}
}

func preview(b []byte) string {
	b = bytes.ReplaceAll(b, []byte("\n"), []byte(" "))
	if len(b) > 60 {
		return string(b[:60]) + "…"
	}
	return string(b)
}
