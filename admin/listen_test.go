package admin

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// A client address that opens connections and sends nothing holds at most MaxConnsPerAddr of
// them: the next from it is closed at once, while another address is served (before, one
// address could hold all MaxConns and starve /livez and /readyz). Its connections count again
// once closed.
func TestListenerCapsOneAddress(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &limitedListener{Listener: tcp, sem: make(chan struct{}, MaxConns), per: map[string]int{},
		exempt: func(net.IP) bool { return false }} // loopback counted, as any other address
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })}
	go hs.Serve(ln)
	defer hs.Close()
	dial := func(from string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", tcp.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	get := func(c net.Conn) (string, error) {
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return "", err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	var held []net.Conn
	for range MaxConnsPerAddr {
		c := dial("127.0.0.1")
		io.WriteString(c, "GET / HTTP/1.1\r\n") // and nothing more
		held = append(held, c)
	}
	// Connections are accepted in order: once the next from 127.0.0.2 is served, all are counted.
	if body, err := get(dial("127.0.0.2")); err != nil || body != "ok" {
		t.Fatalf("another address while 127.0.0.1 holds %d: %q %v, want served", MaxConnsPerAddr, body, err)
	}
	if body, err := get(dial("127.0.0.1")); err == nil {
		t.Fatalf("connection %d of 127.0.0.1: served %q, want closed", MaxConnsPerAddr+1, body)
	} else if !strings.Contains(err.Error(), "EOF") && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("connection %d of 127.0.0.1: %v, want closed", MaxConnsPerAddr+1, err)
	}
	held[0].Close()
	var body string
	for try := 0; body != "ok"; try++ { // the close reaches the listener a moment later
		if try == 1000 {
			t.Fatalf("127.0.0.1 after closing one of its connections: %q %v, want served", body, err)
		}
		body, err = get(dial("127.0.0.1"))
		time.Sleep(time.Millisecond)
	}
}

// A backup client that stops reading does not hold the one backup that may run: the write that
// makes no progress for backupStall ends it, and the next backup runs.
func TestBackupClientThatStopsReadingIsLetGo(t *testing.T) {
	defer func(d time.Duration) { backupStall = d }(backupStall)
	backupStall = 200 * time.Millisecond
	var running sync.Mutex
	ended := make(chan error, 2)
	s := New(Config{})
	s.SetBackend(Backend{Backup: func(ctx context.Context, w io.Writer) error {
		if !running.TryLock() {
			return errors.New("a backup is already running")
		}
		defer running.Unlock()
		chunk := make([]byte, 64<<10)
		for {
			if _, err := w.Write(chunk); err != nil {
				ended <- err
				return err
			}
		}
	}})
	l, err := Listen(s, ListenConfig{Addr: "127.0.0.1:0", WriteTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	url := "http://" + l.Addr().String() + "/v1/backup"
	stalled, err := http.Post(url, "application/json", nil) // its body is never read
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Body.Close()
	if stalled.StatusCode != 200 {
		b, _ := io.ReadAll(stalled.Body)
		t.Fatalf("the first backup: %s %s", stalled.Status, b)
	}
	if err := <-ended; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the stalled backup's write: %v, want the deadline exceeded", err)
	}
	next, err := http.Post(url, "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Body.Close()
	if n, err := io.CopyN(io.Discard, next.Body, 1<<20); next.StatusCode != 200 || err != nil {
		t.Fatalf("the next backup: %s, read %d bytes (%v), want 200 and its tar", next.Status, n, err)
	}
}
