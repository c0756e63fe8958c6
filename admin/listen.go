package admin

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/orderstore/orderstore/internal/lograte"
)

// MaxConns caps a Listener's open connections, below the process's file descriptors: a flood of
// idle keep-alives cannot starve nats of descriptors for its clients and stores.
const MaxConns = 256

// MaxConnsPerAddr caps those of one client address (an IPv6 /64; loopback is not counted): a client
// that opens connections and sends nothing cannot hold every one and starve /livez and /readyz.
const MaxConnsPerAddr = 32

// ListenConfig is what [Listen] needs.
type ListenConfig struct {
	Addr string      // host:port
	TLS  *tls.Config // nil: plain HTTP
	// Timeouts of net/http's Server; 0 is none.
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	Log                                    *slog.Logger     // net/http's own errors, at warn, at most one a second
	now                                    func() time.Time // tests: the clock of Log's limit
}

// Listener serves a handler on a TCP address (the admin listener), at most MaxConns at a time.
type Listener struct {
	hs     *http.Server
	ln     net.Listener
	served chan struct{} // closed once Serve returned, with err
	err    error
}

// Listen listens on c.Addr and serves h in a goroutine of its own, which [Listener.Close] joins.
func Listen(h http.Handler, c ListenConfig) (*Listener, error) {
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return nil, err
	}
	ln = &limitedListener{Listener: ln, sem: make(chan struct{}, MaxConns), per: map[string]int{}, exempt: net.IP.IsLoopback}
	if c.TLS != nil {
		ln = tls.NewListener(ln, c.TLS)
	}
	log := cmp.Or(c.Log, slog.New(slog.DiscardHandler))
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: min(5*time.Second, cmp.Or(max(c.ReadTimeout, 0), 5*time.Second)), // ReadTimeout if less
		ReadTimeout:       c.ReadTimeout,
		WriteTimeout:      c.WriteTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          stdlog.New(limitedLog{&lograte.Limiter{Now: c.now}, log}, "", 0),
	}
	l := &Listener{hs: hs, ln: ln, served: make(chan struct{})}
	go func() { l.err = hs.Serve(ln); close(l.served) }()
	return l, nil
}

// Addr is the address it listens on (the real port when Addr's was 0).
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Served is closed when serving ended; [Listener.Err] says why.
func (l *Listener) Served() <-chan struct{} { return l.served }

// Err is why serving ended (http.ErrServerClosed after Shutdown or Close).
func (l *Listener) Err() error {
	select {
	case <-l.served:
		return l.err
	default:
		return nil
	}
}

// Shutdown stops taking requests and finishes those in flight up to ctx, then closes the rest.
func (l *Listener) Shutdown(ctx context.Context) error {
	if err := l.hs.Shutdown(ctx); err != nil {
		l.hs.Close()
		return fmt.Errorf("admin listener %s: shutdown: %w", l.ln.Addr(), err)
	}
	return nil
}

// Close closes the listener and every connection, and waits for the serve goroutine.
func (l *Listener) Close() error {
	err := l.hs.Close()
	<-l.served
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// limitedLog is an http.Server's ErrorLog: what a client causes (a failed TLS handshake).
type limitedLog struct {
	*lograte.Limiter
	log *slog.Logger
}

func (l limitedLog) Write(p []byte) (int, error) {
	l.Warn(l.log, "", strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// limitedListener accepts at most cap(sem) connections at a time; the next
// waits until one closes (net/http's Serve retries Accept). One more from an
// address that holds MaxConnsPerAddr is closed at once.
type limitedListener struct {
	net.Listener
	sem    chan struct{}
	mu     sync.Mutex
	per    map[string]int    // open connections by client address
	exempt func(net.IP) bool // addresses not counted
}

func (l *limitedListener) Accept() (net.Conn, error) {
	for {
		l.sem <- struct{}{}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.sem
			return nil, err
		}
		addr := ""
		if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok && !l.exempt(ta.IP) {
			addr = limitKey(ta.IP.String()) // an IPv6 client's /64
		}
		l.mu.Lock()
		if full := addr != "" && l.per[addr] >= MaxConnsPerAddr; full {
			l.mu.Unlock()
			c.Close()
			<-l.sem
			continue
		}
		l.per[addr]++
		l.mu.Unlock()
		return &limitedConn{Conn: c, release: sync.OnceFunc(func() {
			l.mu.Lock()
			if l.per[addr]--; l.per[addr] == 0 {
				delete(l.per, addr)
			}
			l.mu.Unlock()
			<-l.sem
		})}, nil
	}
}

type limitedConn struct {
	net.Conn
	release func() // once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}
