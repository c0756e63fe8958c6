package admin

import (
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
