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

// Guesses in flight at once count together: each takes its failure when it is checked, not when
// its verdict is in (a check, then a count after the verdict, let every guess sent at once pass).
func TestLimiterCountsGuessesInFlight(t *testing.T) {
	l := limiter{m: map[string]*bucket{}}
	allowed := 0
	for range 3 * failBurst { // none has its verdict yet
		if ok, _ := l.spend("192.0.2.7"); ok {
			allowed++
		}
	}
	if allowed != failBurst {
		t.Errorf("%d guesses checked before any verdict: %d allowed, want %d", 3*failBurst, allowed, failBurst)
	}
	l.refund("192.0.2.7") // a right one
	if ok, _ := l.spend("192.0.2.7"); !ok {
		t.Error("after a refund: no guess allowed, want one")
	}
	if ok, wait := l.spend("192.0.2.7"); ok || wait <= 0 || wait > failRefill {
		t.Errorf("with none left: allowed %v, wait %v, want refused for at most %v", ok, wait, failRefill)
	}

	s := New(Config{Token: "the-right-admin-token"})
	const n = 20 * failBurst
	codes := make(chan int, n)
	start := make(chan struct{})
	for range n {
		go func() {
			req := httptest.NewRequest("GET", "http://127.0.0.1:8222/v1/status", nil)
			req.Header.Set("Authorization", "Bearer guess")
			rec := httptest.NewRecorder()
			<-start
			s.ServeHTTP(rec, req)
			codes <- rec.Code
		}()
	}
	close(start)
	got := map[int]int{}
	for range n {
		got[<-codes]++
	}
	if got[401] != failBurst || got[429] != n-failBurst {
		t.Errorf("%d bearer guesses at once: answers %v, want %d checked (401) and the rest refused (429)", n, got, failBurst)
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

// A browser's cached basic auth, or a proxy doing basic auth, sends Authorization: Basic with
// every request. It is no token attempt: the dashboard session passes beside it, and nothing
// counts against the address, whose right bearer token still passes after.
func TestBasicAuthorizationIsNoFailedSignIn(t *testing.T) {
	const token = "the-right-admin-token"
	s := New(Config{Token: token})
	get := func(authz, cookie string) int {
		req := httptest.NewRequest("GET", "http://127.0.0.1:8222/", nil)
		req.Header.Set("Authorization", authz)
		if cookie != "" {
			req.Header.Set("Cookie", cookie)
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		return rec.Code
	}
	req := httptest.NewRequest("POST", "http://127.0.0.1:8222/login", strings.NewReader("token="+token))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	cookie, _, _ := strings.Cut(rec.Header().Get("Set-Cookie"), ";")
	if rec.Code != 303 || !strings.HasPrefix(cookie, sessionCookie+"=") {
		t.Fatalf("/login = %d, Set-Cookie %q", rec.Code, cookie)
	}
	const basic = "Basic dXNlcjpwYXNz"
	got := map[int]int{}
	for range 3 * failBurst {
		got[get(basic, cookie)]++
	}
	if got[200] != 3*failBurst {
		t.Errorf("%d requests with the session and %q: answers %v, want all 200", 3*failBurst, basic, got)
	}
	got = map[int]int{}
	for range 3 * failBurst {
		got[get(basic, "")]++
	}
	if got[401] != 3*failBurst {
		t.Errorf("%d requests with %q alone: answers %v, want all 401 (no token, no failed sign-in)", 3*failBurst, basic, got)
	}
	if code := get("Bearer "+token, ""); code != 200 {
		t.Errorf("the right bearer token after them: %d, want 200 (the address not limited)", code)
	}
}
