// Package admin serves orderstore's HTTP admin listener (docs/http-api.md): health and readiness,
// Prometheus metrics, a JSON status, the order projection and dead-letter API, the nats-server
// monitoring endpoints, and a live dashboard.
//
// [New] builds a Server from static facts, and it can serve before the broker is up: until
// [Server.SetBackend], /readyz answers 503 "recovering" and the data endpoints 503, so that a busy
// admin port fails start-up fast and a long stream recovery shows. What it reads from the running
// parts comes in through small interfaces ([Processor], [DeadLetters], [Orders]) that the root
// package's Appliance satisfies.
package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/orderstore/orderstore/internal/backup"
	"github.com/orderstore/orderstore/internal/lograte"
	"github.com/orderstore/orderstore/internal/orderindex"
	"github.com/orderstore/orderstore/processor"

	"github.com/orderstore/orderstore/status"
)

// Config is what the admin server knows from the start.
type Config struct {
	// Token, when set, is required as "Authorization: Bearer <token>" (or the dashboard's session
	// cookie, from /login) on everything but /livez and /readyz.
	Token string

	// AllowedHosts are the host names a request's Host may carry besides
	// IP addresses and "localhost" (see access.go).
	AllowedHosts []string

	// Stream, Durable, DeadLetterStream and ProjectionBucket name
	// orderstore's own objects: /readyz checks these and nothing else.
	Stream string
	// ConsumerStream is the stream the durable reads ("" means Stream): a hub's aggregate stream.
	ConsumerStream string
	Subjects       []string
	// MaxEventBytes bounds an HTTP-ingested event's body (stream.max_msg_size); 0 is 1 MiB.
	MaxEventBytes    int64
	Durable          string // empty when the processor is disabled
	DeadLetterStream string
	ProjectionBucket string

	// Limits of the stream as configured (0 or -1: unlimited).
	MaxBytes int64
	MaxMsgs  int64
	MaxAge   time.Duration

	// SyncPolicy is the durability mode ("group-commit", "always" or
	// "interval <d>") and SyncDescription its one-line meaning.
	SyncPolicy      string
	SyncDescription string
	// Cipher is the store's encryption cipher; "" for a plain store.
	Cipher string
	// StaleAfter is processor.stale_after: how long an order may stay in
	// a status with no event before it is stale.
	StaleAfter map[string]time.Duration

	// StoreDir and FreeBytes report the store's free disk; below DiskHeadroom bytes, not ready.
	StoreDir     string
	FreeBytes    func() (uint64, error)
	DiskHeadroom int64
	// MaxStore is jetstream.max_file_store in bytes (0: the account's JetStream limit, if any).
	MaxStore int64

	Build status.BuildInfo

	// Monitoring maps paths such as "/varz" to nats-server's own handlers.
	Monitoring map[string]http.HandlerFunc

	Logger *slog.Logger
}

// Processor is what admin reads from the built-in processor.
type Processor interface {
	Stats() processor.Stats
	Lag(ctx context.Context) (processor.LagInfo, error)
}

// DeadLetters lists and replays dead letters.
type DeadLetters interface {
	// DeadLetters returns up to limit from sequence from on, and where to continue (0 at the end).
	DeadLetters(ctx context.Context, from uint64, limit int) ([]processor.DeadLetter, uint64, error)
	// LatestDeadLetters returns up to n of the most recent, newest last.
	LatestDeadLetters(ctx context.Context, n int) ([]processor.DeadLetter, error)
	// ReplayDeadLetter republishes one; an unknown seq matches Backend.NotFound.
	ReplayDeadLetter(ctx context.Context, seq uint64) (newSeq uint64, err error)
}

// Orders reads the projection. An unknown id matches Backend.NotFound.
type Orders interface {
	Order(ctx context.Context, id string) (processor.Order, error)
}

// Backend is everything that exists once the broker is up and declared.
type Backend struct {
	// NotFound is what Orders and DeadLetters return (wrapped) for what does not exist: answered
	// 404. The backend owns it (orderstore's ErrNotFound).
	NotFound    error
	JS          jetstream.JetStream
	Processor   Processor // nil when disabled
	DeadLetters DeadLetters
	Orders      Orders
	// History, if set, serves an order's events, its state as of a point and its dead letters.
	History History
	// Checks, if set, adds readiness checks of the parts admin cannot see
	// (connections, the processor's progress).
	Checks func(ctx context.Context) []status.Check
	// Publish, if set, serves HTTP ingest (POST /v1/events/{type}): it stores one event and returns
	// the stream's ack once the event is as durable as the durability mode says (with group commit:
	// after the sync that covers it).
	Publish func(ctx context.Context, subject string, h nats.Header, data []byte, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
	// Ingest, if set, reports group commit's figures for /metrics and /v1/status.
	Ingest func() *status.IngestStats
	// Validation, if set, reports schema validation at ingest (nil when it checks nothing).
	Validation func() *status.ValidationStats
	// ConfigReload, if set, reports the last reload's outcome (/metrics, /v1/status).
	ConfigReload func() *status.ConfigReload
	// Guard, if set, reports what admission and the durable guard refused.
	Guard func() *status.GuardStats
	// Backup, if set, writes a backup as a tar stream (POST /v1/backup).
	Backup func(ctx context.Context, w io.Writer) error
	// Topology, if set, reports the cluster, the leaf links and a hub's sources in /v1/status.
	Topology func(ctx context.Context) *status.Topology
	// Recovery lists what start-up found and did about a damaged store: served in /v1/status,
	// counted in /metrics, and a warning (still ready) in /readyz.
	Recovery []string
	// Rebuild, if set, rebuilds the projection (/v1/projection/rebuild); RebuildCodes give its
	// refusals (matched by errors.Is) their HTTP status, as a *RebuildError does.
	Rebuild      Rebuild
	RebuildCodes map[error]int
	// OrderIndex, if set, lists orders by status and age (GET /v1/orders)
	// and counts them (/metrics, /v1/status).
	OrderIndex *orderindex.Index
}

// Server is the admin HTTP handler.
type Server struct {
	cfg     Config
	log     *slog.Logger
	backend atomic.Pointer[Backend]
	// starting says what start-up waits for ("" : the default, recovering the streams).
	starting atomic.Pointer[string]
	mux      *http.ServeMux
	handler  http.Handler
	reg      *prometheus.Registry
	sess     sessions
	limit    limiter
	quiet    lograte.Limiter // refusals anyone can cause: a line a second of each kind at most
	ready    readyCache
}

// New builds the server. Serve it with net/http; call SetBackend once the broker is ready.
func New(cfg Config) *Server {
	s := &Server{cfg: cfg, log: cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)), mux: http.NewServeMux(),
		reg: prometheus.NewRegistry(), sess: sessions{m: map[string]time.Time{}}, limit: limiter{m: map[string]*bucket{}}}
	s.reg.MustRegister(&collector{s: s}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.routes()
	s.handler = s.guard(s.mux)
	return s
}

// SetBackend makes the server serve data: the broker is up, its objects are
// declared and the recovery check passed.
func (s *Server) SetBackend(b Backend) { s.backend.Store(&b) }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

func (s *Server) routes() {
	s.mux.HandleFunc("GET /livez", s.livez)
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.Handle("GET /metrics", s.auth(promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)})))
	s.mux.Handle("GET /v1/status", s.auth(s.needBackend(s.status)))
	s.mux.Handle("GET /v1/orders", s.auth(s.needBackend(s.ordersList)))
	s.mux.Handle("GET /v1/orders/{id}", s.auth(s.needBackend(orderIDChecked(s.order))))
	s.mux.Handle("GET /v1/orders/{id}/events", s.auth(s.needBackend(orderIDChecked(s.orderEvents))))
	s.mux.Handle("GET /v1/orders/{id}/dlq", s.auth(s.needBackend(orderIDChecked(s.orderDeadLetters))))
	s.mux.Handle("GET /v1/dlq", s.auth(s.needBackend(s.dlqList)))
	s.mux.Handle("POST /v1/dlq/{seq}/replay", s.auth(s.needBackend(s.dlqReplay)))
	s.mux.Handle("POST /v1/backup", s.auth(s.needBackend(s.backup)))
	s.mux.Handle("POST /v1/projection/rebuild", s.auth(s.needBackend(s.rebuildStart)))
	s.mux.Handle("GET /v1/projection/rebuild", s.auth(s.needBackend(s.rebuildGet)))
	s.mux.Handle("DELETE /v1/projection/rebuild", s.auth(s.needBackend(s.rebuildCancel)))
	s.mux.Handle("POST /v1/events/{type}", s.auth(s.needBackend(s.publishEvent)))
	for path, h := range s.cfg.Monitoring {
		s.mux.Handle("GET "+path, s.auth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h(noCORS{w}, r) })))
	}
	s.mux.HandleFunc("POST /login", s.login)
	s.mux.HandleFunc("POST /logout", s.logout)
	s.mux.Handle("GET /{$}", s.auth(http.HandlerFunc(s.dashboard)))
	s.mux.Handle("GET /ui/", s.auth(http.StripPrefix("/ui/", http.FileServerFS(uiFS()))))
}

// noCORS drops the Access-Control-Allow-Origin: * of nats-server's monitoring
// handlers: any web page could read them from the operator's browser.
type noCORS struct{ http.ResponseWriter }

func (w noCORS) WriteHeader(code int) {
	w.Header().Del("Access-Control-Allow-Origin")
	w.ResponseWriter.WriteHeader(code)
}

// auth requires the token when one is configured. Failed attempts count
// against the client's address (see access.go).
func (s *Server) auth(h http.Handler) http.Handler {
	if s.cfg.Token == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Only a bearer token is a token attempt: another scheme (a browser's cached basic auth,
		// a proxy's) is no guess. A valid session passes beside it (its id is 256 random bits, not
		// something to guess), so a guesser sharing the operator's address cannot lock the
		// dashboard out. A blocked address gets 429 for every token, right or wrong: a guess that
		// happens to be right must not answer differently while guessing is limited.
		ip := remoteIP(r)
		got, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if c, err := r.Cookie(sessionCookie); err == nil && !bearer && s.sess.valid(c.Value) {
			h.ServeHTTP(w, r)
			return
		}
		if ok, wait := s.limit.spend(ip); !ok {
			tooMany(w, wait)
			return
		}
		if bearer && tokenEqual(got, s.cfg.Token) {
			s.limit.refund(ip)
			h.ServeHTTP(w, r)
			return
		}
		// An expired or unknown session (a tab left open across a restart)
		// is not a guess: only a wrong bearer token counts as a failure.
		if bearer {
			s.log.Warn("admin request refused: bad credentials", "remote", ip, "path", clip(r.URL.Path))
		} else {
			s.limit.refund(ip)
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="orderstore"`)
		if strings.Contains(r.Header.Get("Accept"), "text/html") {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, loginPage)
			return
		}
		writeError(w, http.StatusUnauthorized, "unauthorized: send Authorization: Bearer <admin token>")
	})
}

// login takes the token from the dashboard's form (the body only, never the query string, which
// ends up in logs and history) and answers with a session cookie of a random id, never the token.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Token == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	// The body first: a guess held back while the limit is checked would
	// pass it with every other guess in flight.
	ip, token := remoteIP(r), r.PostFormValue("token")
	if ok, wait := s.limit.spend(ip); !ok {
		s.quiet.Warn(s.log, "login", "admin sign-in refused: too many failures", "remote", ip)
		tooMany(w, wait)
		return
	}
	if tokenEqual(token, s.cfg.Token) {
		s.limit.refund(ip)
		id, err := s.sess.create()
		if err != nil {
			writeError(w, http.StatusInternalServerError, "session: "+err.Error())
			return
		}
		s.log.Info("admin signed in", "remote", ip)
		http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/", MaxAge: int(sessionTTL / time.Second),
			HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	s.log.Warn("admin sign-in failed", "remote", ip)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusUnauthorized)
	fmt.Fprint(w, loginPage)
}

// logout ends the dashboard session.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(sessionCookie); err == nil {
		s.sess.remove(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// apiHandler serves an API request once the backend is set. An error it returns is answered
// {"error": ...}: an *apiError's, a *RebuildError's or a RebuildCodes' code, any other 500.
type apiHandler func(http.ResponseWriter, *http.Request, *Backend) error

// apiError is an answer other than success.
type apiError struct {
	code      int
	msg, hint string
}

func (e *apiError) Error() string { return e.msg }

// errorf is an *apiError with code and the formatted message.
func errorf(code int, format string, args ...any) error {
	return &apiError{code: code, msg: fmt.Sprintf(format, args...)}
}

func (s *Server) needBackend(h apiHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := s.backend.Load()
		if b == nil {
			writeError(w, http.StatusServiceUnavailable, "starting: "+s.startingReason())
			return
		}
		if err := h(w, r, b); err != nil {
			e := &apiError{code: http.StatusInternalServerError, msg: err.Error()}
			if re := (*RebuildError)(nil); errors.As(err, &re) {
				e.code = re.Code
			}
			for target, code := range b.RebuildCodes {
				if errors.Is(err, target) {
					e.code = code
				}
			}
			errors.As(err, &e)
			body := map[string]string{"error": e.msg}
			if e.hint != "" {
				body["hint"] = e.hint
			}
			writeJSON(w, e.code, body)
		}
	})
}

// SetStarting says what start-up waits for, until SetBackend: /readyz
// and the API's 503 show it ("" restores the default).
func (s *Server) SetStarting(reason string) { s.starting.Store(&reason) }

func (s *Server) startingReason() string {
	if r := s.starting.Load(); r != nil && *r != "" {
		return *r
	}
	return "the broker is starting and recovering its streams"
}

func (s *Server) durability() map[string]string {
	return map[string]string{"mode": s.cfg.SyncPolicy, "sync_interval": s.cfg.SyncPolicy, "description": s.cfg.SyncDescription}
}

func (s *Server) livez(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "durability": s.durability()})
}

// Readiness checks orderstore's own objects only (its stream, dead-letter stream, projection
// bucket, consumer and processor): a broken ad-hoc consumer elsewhere must not make the node
// unready. status is "ready", "not ready" or "recovering" (the broker is not up yet).
func (s *Server) Readiness(ctx context.Context) (string, []status.Check) {
	b := s.backend.Load()
	if b == nil {
		return "recovering", []status.Check{{Name: "startup", OK: false, Reason: s.startingReason()}}
	}
	return s.readiness(ctx, b, &status.Status{})
}

// readiness also fills st with what its lookups read, and st.Errors with
// the lookups that failed, so that /v1/status asks JetStream once.
func (s *Server) readiness(ctx context.Context, b *Backend, st *status.Status) (string, []status.Check) {
	var checks []status.Check
	add := func(name string, err error) {
		c := status.Check{Name: name, OK: err == nil}
		if err != nil {
			c.Reason = err.Error()
		}
		checks = append(checks, c)
	}
	fail := func(err error) { st.Errors = append(st.Errors, err.Error()) }
	ai, err := b.JS.AccountInfo(ctx)
	if err != nil {
		fail(err)
	} else {
		st.Store.JetStreamBytes, st.Store.JetStreamMaxBytes = ai.Store, ai.Limits.MaxStore
		if s.cfg.MaxStore > 0 {
			st.Store.JetStreamMaxBytes = s.cfg.MaxStore
		}
	}
	add("jetstream", err)
	add("storage", func() error {
		if used, max := st.Store.JetStreamBytes, st.Store.JetStreamMaxBytes; max > 0 && float64(used) >= 0.99*float64(max) {
			return fmt.Errorf("JetStream uses %d of its %d bytes (jetstream.max_file_store): new events are refused", used, max)
		}
		if s.cfg.FreeBytes == nil {
			return nil
		}
		free, err := s.cfg.FreeBytes()
		if err != nil {
			fail(err)
		} else if st.Store.FreeBytes = free; s.cfg.DiskHeadroom > 0 && free < uint64(s.cfg.DiskHeadroom) {
			return fmt.Errorf("free disk under %s is %d bytes, below jetstream.disk_headroom (%d bytes): writes may fail", s.cfg.StoreDir, free, s.cfg.DiskHeadroom)
		}
		return nil
	}())

	add("stream", func() error {
		str, err := b.JS.Stream(ctx, s.cfg.Stream)
		if err != nil {
			fail(err)
			return fmt.Errorf("stream %q: %w", s.cfg.Stream, err)
		}
		i := str.CachedInfo()
		st.Stream.Messages, st.Stream.Bytes = i.State.Msgs, i.State.Bytes
		st.Stream.FirstSeq, st.Stream.LastSeq = i.State.FirstSeq, i.State.LastSeq
		if i.State.Msgs > 0 {
			st.Stream.FirstTime = i.State.FirstTime
			st.Stream.OldestAgeSeconds = max(time.Since(i.State.FirstTime).Seconds(), 0)
		}
		if st.Stream.MaxBytes > 0 {
			st.Stream.BytesPercent = 100 * float64(i.State.Bytes) / float64(st.Stream.MaxBytes)
		}
		if i.Config.Storage != jetstream.FileStorage {
			return fmt.Errorf("stream %q: storage is %s, want file", s.cfg.Stream, i.Config.Storage)
		}
		for _, subj := range s.cfg.Subjects {
			if !slices.Contains(i.Config.Subjects, subj) {
				return fmt.Errorf("stream %q: subject %q missing (has %q)", s.cfg.Stream, subj, i.Config.Subjects)
			}
		}
		if c := i.Config; c.Discard == jetstream.DiscardNew && (c.MaxMsgs > 0 && i.State.Msgs >= uint64(c.MaxMsgs) ||
			c.MaxBytes > 0 && float64(i.State.Bytes) >= 0.99*float64(c.MaxBytes)) {
			return fmt.Errorf("stream %q is full (%d events of max_msgs %d, %d bytes of max_bytes %d) and discards new events: every publish is refused; raise stream.max_msgs or max_bytes, or set discard = \"old\"",
				s.cfg.Stream, i.State.Msgs, c.MaxMsgs, i.State.Bytes, c.MaxBytes)
		}
		return nil
	}())
	if s.cfg.DeadLetterStream != "" {
		d, err := b.JS.Stream(ctx, s.cfg.DeadLetterStream)
		if err != nil {
			fail(err)
			err = fmt.Errorf("dead-letter stream %q: %w", s.cfg.DeadLetterStream, err)
		} else {
			i := d.CachedInfo()
			st.DeadLetters.Messages, st.DeadLetters.Bytes, st.DeadLetters.MaxBytes = i.State.Msgs, i.State.Bytes, i.Config.MaxBytes
		}
		add("dead_letter_stream", err)
		if dl := st.DeadLetters; err == nil && dl.MaxBytes > 0 && float64(dl.Bytes) >= 0.9*float64(dl.MaxBytes) {
			checks[len(checks)-1].Reason = fmt.Sprintf("warning: the dead-letter stream holds %d of its %d bytes (processor.dead_letter_max_bytes): beyond them its oldest dead letters are discarded, unreplayed; replay them (orderstore dlq replay) or raise the limit",
				dl.Bytes, dl.MaxBytes)
		}
	}
	if s.cfg.ProjectionBucket != "" {
		add("projection_bucket", func() error {
			kv, err := b.JS.KeyValue(ctx, s.cfg.ProjectionBucket)
			var kst jetstream.KeyValueStatus
			if err == nil {
				kst, err = kv.Status(ctx)
			}
			if err != nil {
				fail(err)
				return fmt.Errorf("projection bucket %q: %w", s.cfg.ProjectionBucket, err)
			}
			if ks, ok := kst.(*jetstream.KeyValueBucketStatus); ok {
				i := ks.StreamInfo()
				st.Projection.Orders, st.Projection.Bytes, st.Projection.MaxBytes = i.State.Msgs, i.State.Bytes, i.Config.MaxBytes
				if o := st.Orders; o != nil { // the index read after the bucket: no lag made up
					o.IndexLagWrites = i.State.LastSeq - min(b.OrderIndex.Applied(), i.State.LastSeq)
				}
				// Full: less room left than a record or two, or 1%.
				if max := i.Config.MaxBytes; max > 0 && int64(i.State.Bytes) > max-min(4096, max/4)-max/100 {
					return fmt.Errorf("projection bucket %q is full (%d of %d bytes): new orders cannot be projected and are dead-lettered; raise processor.projection_max_bytes, then orderstore dlq replay -all",
						s.cfg.ProjectionBucket, i.State.Bytes, max)
				}
			}
			return nil
		}())
	}
	if s.cfg.Durable != "" {
		add("consumer", func() error {
			c, err := b.JS.Consumer(ctx, s.consumerStream(), s.cfg.Durable)
			if err != nil {
				return fmt.Errorf("consumer %q: %w", s.cfg.Durable, err)
			}
			if c.CachedInfo().Config.AckPolicy != jetstream.AckExplicitPolicy {
				return fmt.Errorf("consumer %q: ack policy is %s, want explicit", s.cfg.Durable, c.CachedInfo().Config.AckPolicy)
			}
			return nil
		}())
		var err error
		if b.Processor == nil || !b.Processor.Stats().Running {
			err = errors.New("processor is not running")
		}
		add("processor", err)
	}
	if b.Checks != nil {
		checks = append(checks, b.Checks(ctx)...)
	}
	if n := len(b.Recovery); n > 0 {
		checks = append(checks, status.Check{Name: "recovery", OK: true, Reason: fmt.Sprintf(
			"warning: start-up found a damaged store and recovered what it could (%d notes in /v1/status \"recovery\" and the log); check for lost events", n)})
	}
	if slices.ContainsFunc(checks, func(c status.Check) bool { return !c.OK }) {
		return "not ready", checks
	}
	return "ready", checks
}

// readyCache is /readyz's last answer. Anyone may ask, and an evaluation makes several JetStream
// requests: concurrent callers share one, and a caller within a second of its start reuses it,
// whether it passed or failed (Readiness, the library's, evaluates each time).
type readyCache struct {
	sync.Mutex
	every       time.Duration // 0: a second (tests change it)
	start, done time.Time
	status      string
	checks      []status.Check
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	c, arrived := &s.ready, time.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 3*time.Second)
	defer cancel()
	c.Lock()
	if arrived.Sub(c.start) >= cmp.Or(c.every, time.Second) && !c.done.After(arrived) { // none started lately or ran meanwhile
		c.start = time.Now()
		c.status, c.checks = s.Readiness(ctx)
		c.done = time.Now()
		// A failed reload's error quotes the config file: it is for /v1/status, behind the token.
		if i := slices.IndexFunc(c.checks, func(c status.Check) bool { return c.Name == "config_reload" }); i >= 0 {
			c.checks[i].Reason = "warning: the last reload failed: see config_reload in /v1/status, or the log"
		}
	}
	st, checks := c.status, c.checks
	c.Unlock()
	code := http.StatusOK
	if st != "ready" {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, map[string]any{"status": st, "checks": checks, "durability": s.durability()})
}

func (s *Server) order(w http.ResponseWriter, r *http.Request, b *Backend) error {
	if q := r.URL.Query(); q.Has("as_of") || q.Has("as_of_seq") {
		return s.orderAsOf(w, r, b)
	}
	id := r.PathValue("id")
	o, err := b.Orders.Order(r.Context(), id)
	if b.isNotFound(err) {
		return errorf(http.StatusNotFound, "order %q not found", clip(id))
	}
	return writeResult(w, http.StatusOK, o, err)
}

func (s *Server) dlqList(w http.ResponseWriter, r *http.Request, b *Backend) error {
	q := r.URL.Query()
	limit, err := queryInt(q.Get("limit"), 100)
	if err != nil || limit < 1 || limit > 1000 {
		return errorf(http.StatusBadRequest, "limit must be 1..1000")
	}
	if q.Has("latest") {
		items, err := b.DeadLetters.LatestDeadLetters(r.Context(), limit)
		return writeResult(w, http.StatusOK, map[string]any{"items": items}, err)
	}
	from, err := queryInt(q.Get("from"), 1)
	if err != nil || from < 0 {
		return errorf(http.StatusBadRequest, "from must be a sequence number")
	}
	items, next, err := b.DeadLetters.DeadLetters(r.Context(), uint64(from), limit)
	return writeResult(w, http.StatusOK, map[string]any{"items": items, "next": next}, err)
}

func (s *Server) dlqReplay(w http.ResponseWriter, r *http.Request, b *Backend) error {
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil || seq == 0 {
		return errorf(http.StatusBadRequest, "seq must be a dead-letter sequence number")
	}
	warning := s.poisonAgain(r.Context(), b, seq)
	newSeq, err := b.DeadLetters.ReplayDeadLetter(r.Context(), seq)
	if b.isNotFound(err) {
		return errorf(http.StatusNotFound, "dead letter %d not found", seq)
	} else if errors.Is(err, processor.ErrReplayIDTaken) {
		return errorf(http.StatusConflict, "%s", err)
	} else if apiErr := (*jetstream.APIError)(nil); errors.As(err, &apiErr) && apiErr.Code >= 400 && apiErr.Code < 600 {
		return errorf(apiErr.Code, "%s", err) // the stream refused it (overload, schema, a store that cannot write)
	} else if err != nil {
		return err
	}
	s.log.Info("dead letter replayed", "dlq_seq", seq, "new_seq", newSeq)
	out := map[string]any{"replayed": seq, "new_seq": newSeq}
	if warning != "" {
		s.log.Warn("dead letter replayed as poison", "dlq_seq", seq, "new_seq", newSeq, "warning", warning)
		out["warning"] = warning
	}
	return writeResult(w, http.StatusOK, out, nil)
}

func (b *Backend) isNotFound(err error) bool { return b.NotFound != nil && errors.Is(err, b.NotFound) }

// poisonAgain says whether dead letter seq, replayed as it is, will be dead-lettered again at once
// (its payload is no order event), and why; "" when it will not or cannot tell (a trimmed copy, no
// dead-letter stream).
func (s *Server) poisonAgain(ctx context.Context, b *Backend, seq uint64) string {
	if s.cfg.DeadLetterStream == "" || b.JS == nil {
		return ""
	}
	d, err := processor.GetDeadLetter(ctx, b.JS, s.cfg.DeadLetterStream, seq)
	if err != nil || d.Trimmed != "" || d.Subject == "" {
		return ""
	}
	if _, err := processor.EventOf(d.Subject, d.Data, nil, 0, time.Time{}, 0); err != nil {
		return "it is dead-lettered again at once: " + strings.TrimPrefix(err.Error(), processor.ErrPoison.Error()+": ") +
			"; publish a corrected event instead"
	}
	return ""
}

// backupStall ends a backup whose client took nothing for this long (each write's deadline): it
// would hold the one backup that may run, and its copy on disk, for as long as it stays connected.
var backupStall = time.Minute

// backup streams a backup of the stream, the dead letters and the projection as a tar (the layout
// `orderstore backup` writes to its directory). It may take long: its write deadline is lifted, and
// each write gets backupStall instead.
func (s *Server) backup(w http.ResponseWriter, r *http.Request, b *Backend) error {
	if b.Backup == nil {
		return errorf(http.StatusNotImplemented, "backups are not available here")
	}
	tw := &firstWrite{w: w, rc: http.NewResponseController(w)}
	tw.rc.SetWriteDeadline(time.Time{}) // the copy before the first byte may take long
	s.log.Info("backup requested", "remote", remoteIP(r))
	if err := b.Backup(r.Context(), tw); err != nil {
		if errors.Is(err, backup.ErrRunning) || errors.Is(err, backup.ErrNoRoom) {
			// Refused before it began: nothing failed.
			s.log.Warn("backup refused", "err", err)
		} else {
			s.log.Error("backup failed", "err", err)
		}
		if !tw.wrote {
			// Refused or failed before the first byte: say why, and
			// what to do when the error says (the CLI's "hint:" line).
			e := &apiError{http.StatusServiceUnavailable, err.Error(),
				`orderstore's log says why ("backup failed"); run the backup again once that is fixed`}
			if h := interface{ Hint() string }(nil); errors.As(err, &h) {
				e.hint = h.Hint()
			}
			return e
		}
		// Mid-stream: the client sees a truncated tar without its manifest and fails.
		panic(http.ErrAbortHandler)
	}
	return nil
}

// firstWrite sets the tar Content-Type when the first byte goes out, and each write's deadline.
type firstWrite struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	wrote bool
}

func (f *firstWrite) Write(p []byte) (int, error) {
	f.rc.SetWriteDeadline(time.Now().Add(backupStall))
	if !f.wrote {
		f.wrote = true
		f.w.Header().Set("Content-Type", "application/x-tar")
	}
	return f.w.Write(p)
}

// orderIDChecked answers 400 for an {id} no order can have (the
// processor's bound on order ids), before h looks it up.
func orderIDChecked(h apiHandler) apiHandler {
	return func(w http.ResponseWriter, r *http.Request, b *Backend) error {
		if id := r.PathValue("id"); !processor.ValidOrderID(id) {
			return errorf(http.StatusBadRequest,
				"%q is no order id: an order id is 1 to %d letters, digits, '-', '_', '=', '/' or '.' (not starting or ending with '.', no \"..\")",
				clip(id), processor.MaxOrderIDLen)
		}
		return h(w, r, b)
	}
}

// clip shortens what a request sent before it is echoed.
func clip(s string) string {
	if len(s) <= 64 {
		return s
	}
	return s[:64] + "..."
}

func queryInt(s string, def int) (int, error) {
	if s == "" {
		return def, nil
	}
	return strconv.Atoi(s)
}

// writeResult answers v with code, or err when there is one.
func writeResult(w http.ResponseWriter, code int, v any, err error) error {
	if err == nil {
		writeJSON(w, code, v)
	}
	return err
}

// writeError answers {"error": msg} with code.
func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func (s *Server) consumerStream() string { return cmp.Or(s.cfg.ConsumerStream, s.cfg.Stream) }
