package admin

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/internal/testkit"
)

// What an anonymous client can make the admin listener refuse in a loop (a foreign Host, a
// cross-site POST, a sign-in from a blocked address, a failed TLS handshake) is logged once a
// second of each kind at most, with the count left out since: 8 keep-alive clients wrote 80,000
// lines in 3 s, and under journald's rate limit orderstore's own lines were dropped with them.
func TestRefusalsLogOnceASecond(t *testing.T) {
	var logs testkit.LockedBuffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	var secs, handshakes atomic.Int64 // the limiters' clock; the failed handshakes net/http logged
	clock := func() time.Time { return time.Unix(1e9+secs.Load(), 0) }
	s := New(Config{Token: "the-right-admin-token", Logger: log})
	s.quiet.Now = clock
	l, err := Listen(s, ListenConfig{Addr: "127.0.0.1:0", TLS: &tls.Config{}, Log: log,
		now: func() time.Time { handshakes.Add(1); return clock() }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })

	const tlsKind = "http: TLS handshake error"
	kinds := map[string]func() *http.Request{
		"admin request refused: foreign Host": func() *http.Request {
			return httptest.NewRequest("GET", "http://evil.example/v1/status", nil)
		},
		"admin request refused: cross-site": func() *http.Request {
			r := httptest.NewRequest("POST", "http://127.0.0.1/logout", nil)
			r.Header.Set("Origin", "http://evil.example")
			return r
		},
		"admin sign-in refused: too many failures": func() *http.Request { // once the failures are used up
			r := httptest.NewRequest("POST", "http://127.0.0.1/login", strings.NewReader("token=guess"))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			return r
		},
	}
	// send makes each kind refuse n more: answered 421, 403 or 429, or a failed handshake.
	send := func(n int) {
		t.Helper()
		for _, req := range kinds {
			for refused := 0; refused < n; {
				rec := httptest.NewRecorder()
				s.ServeHTTP(rec, req())
				if rec.Code == 421 || rec.Code == 403 || rec.Code == 429 {
					refused++
				}
			}
		}
		want := handshakes.Load() + int64(n)
		for range n { // a connection closed before its ClientHello
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
		}
		embeddedtest.WaitFor(t, 20*time.Second, func() error {
			if got := handshakes.Load(); got < want {
				return fmt.Errorf("net/http logged %d of %d failed handshakes", got, want)
			}
			return nil
		})
	}
	// check says whether each kind logged one line for each count in want, with that count of
	// "suppressed".
	check := func(want ...int) {
		t.Helper()
		got := map[string][]int{}
		for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			var rec struct {
				Msg        string `json:"msg"`
				Suppressed int    `json:"suppressed"`
			}
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			if kind, _, _ := strings.Cut(rec.Msg, " from "); kind == tlsKind || kinds[kind] != nil {
				got[kind] = append(got[kind], rec.Suppressed)
			}
		}
		for _, kind := range append(slices.Collect(maps.Keys(kinds)), tlsKind) {
			if fmt.Sprint(got[kind]) != fmt.Sprint(want) {
				t.Errorf("%q logged with suppressed counts %v, want %v", kind, got[kind], want)
			}
		}
	}
	const n = 200
	send(n)
	check(0) // one line of each kind
	secs.Add(1)
	send(1)
	check(0, n-1) // a second after it, the next, with the count of those left out
}
