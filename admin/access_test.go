package admin

import (
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

// stalledBody says when the handler first reads it, then holds the read
// until released: a client that sends its headers and keeps the body back.
type stalledBody struct {
	reading, release chan struct{}
	body             io.Reader
}

func (b *stalledBody) Read(p []byte) (int, error) {
	select {
	case <-b.reading:
	default:
		close(b.reading)
	}
	<-b.release
	return b.body.Read(p)
}

// A guesser must not get past the sign-in limit by sending many /login
// headers while it still has failures left and the bodies (the guesses)
// only later: each guess counts when it is checked.
func TestLoginLimitHoldsForBodiesSentLater(t *testing.T) {
	s := New(Config{Token: "the-right-admin-token"})
	const n = 3 * failBurst
	bodies := make([]*stalledBody, n)
	codes := make(chan int, n)
	for i := range bodies {
		b := &stalledBody{reading: make(chan struct{}), release: make(chan struct{}), body: strings.NewReader("token=guess")}
		bodies[i] = b
		req := httptest.NewRequest("POST", "http://127.0.0.1:8222/login", b)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		go func() {
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			codes <- rec.Code
		}()
		<-b.reading
	}
	got := map[int]int{}
	for _, b := range bodies { // one guess at a time
		close(b.release)
		got[<-codes]++
	}
	if got[401] != failBurst || got[429] != n-failBurst {
		t.Errorf("%d guesses sent at once, bodies later: answers %v, want %d checked (401) and the rest refused (429)", n, got, failBurst)
	}
}

// An IPv6 client picks its source from a whole /64: counting failures per
// address let it guess without limit, a fresh address every ten guesses.
func TestLoginLimitCountsAnIPv6ClientsWhole64(t *testing.T) {
	s := New(Config{Token: "the-right-admin-token"})
	guess := func(remote string) int {
		req := httptest.NewRequest("POST", "http://127.0.0.1:8222/login", strings.NewReader("token=guess"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.RemoteAddr = remote
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		return rec.Code
	}
	got := map[int]int{}
	for i := range 3 * failBurst {
		got[guess(fmt.Sprintf("[2001:db8:1:2::%x]:4711", i+1))]++
	}
	if got[401] != failBurst {
		t.Errorf("%d guesses from one /64, each from its own address: answers %v, want %d checked (401) and the rest refused (429)", 3*failBurst, got, failBurst)
	}
	if code := guess("[2001:db8:1:3::1]:4711"); code != 401 {
		t.Errorf("a guess from another /64: %d, want 401 (not limited)", code)
	}
	if code := guess("192.0.2.7:4711"); code != 401 {
		t.Errorf("a guess from an IPv4 address: %d, want 401 (not limited)", code)
	}
}
