package admin

import (
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"maps"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// What the admin listener does to requests before any handler sees them (security headers, body
// limit, Host check, cross-site refusals, sign-in limits, sessions): docs/security.md, "Admin
// listener", lists each step and the attack it answers.

const (
	// maxBody bounds every request body; the API takes none larger.
	maxBody = 64 << 10
	// sessionTTL is how long a dashboard sign-in lasts.
	sessionTTL = 12 * time.Hour
	// maxSessions bounds the sessions held; the oldest go first.
	maxSessions = 1024
	// failBurst failed sign-ins from one address are allowed at once, then one per failRefill.
	failBurst  = 10
	failRefill = 6 * time.Second
	// maxLimited bounds the addresses the limiter tracks.
	maxLimited = 4096
)

const sessionCookie = "orderstore_session"

// loginStyle is the login page's inline style; the CSP admits it by hash.
const loginStyle = `body{font:16px system-ui,sans-serif;margin:4em auto;max-width:24em}input{font:inherit;padding:.3em;width:100%;box-sizing:border-box;margin:.5em 0}`

var loginPage = `<!doctype html><meta charset="utf-8"><title>orderstore: sign in</title>
<style>` + loginStyle + `</style>
<h1>orderstore</h1><p>This admin listener requires the admin token (<code>[admin] token</code>).</p>
<form method="post" action="/login"><input type="password" name="token" placeholder="admin token" autocomplete="current-password" autofocus><input type="submit" value="Sign in"></form>`

var csp = func() string {
	sum := sha256.Sum256([]byte(loginStyle))
	return "default-src 'none'; script-src 'self'; style-src 'self' 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) +
		"'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
}()

// guard wraps the mux with the steps above.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		// same-origin, not no-referrer: under no-referrer a browser sends "Origin: null" with a
		// form's POST, and crossSite refused the dashboard's own sign-in and sign-out forms.
		// Nothing leaks to another site either way.
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		if r.Body != nil {
			limit := int64(maxBody)
			if strings.HasPrefix(r.URL.Path, "/v1/events/") {
				limit = cmp.Or(max(s.cfg.MaxEventBytes, 0), 1<<20) // 0 is 1 MiB
			}
			r.Body = http.MaxBytesReader(w, r.Body, limit)
		}
		if r.URL.Path != "/livez" && r.URL.Path != "/readyz" && !s.allowedHost(r.Host) {
			s.quiet.Warn(s.log, "host", "admin request refused: foreign Host", "host", clip(r.Host), "remote", remoteIP(r), "path", clip(r.URL.Path))
			writeError(w, http.StatusMisdirectedRequest, fmt.Sprintf(
				"host %q is not this listener's: add it to [admin] allowed_hosts if you reach orderstore by that name", clip(r.Host)))
			return
		}
		// A repeated parameter would count once, silently (?status=typo&status=paid lists nothing).
		for k, v := range r.URL.Query() {
			if len(v) > 1 && strings.HasPrefix(r.URL.Path, "/v1/") {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("query parameter %q is given %d times: give it once", clip(k), len(v)))
				return
			}
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodOptions || strings.HasPrefix(r.URL.Path, "/v1/") {
			if why := crossSite(r); why != "" {
				s.quiet.Warn(s.log, "cross-site", "admin request refused: cross-site", "reason", why, "remote", remoteIP(r), "path", clip(r.URL.Path))
				writeError(w, http.StatusForbidden, "cross-origin request refused: "+why)
				return
			}
			if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v1/") {
				if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
					writeError(w, http.StatusUnsupportedMediaType, "POST to the API needs Content-Type: application/json (a browser form cannot send one)")
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// allowedHost reports whether a request's Host names this listener: an IP address (a DNS-rebinding
// page always uses a name), localhost, or a name in AllowedHosts (with or without the port).
func (s *Server) allowedHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	return host != "" && (net.ParseIP(host) != nil || host == "localhost" || slices.ContainsFunc(s.cfg.AllowedHosts, func(a string) bool {
		a = strings.ToLower(a)
		return a == host || a == strings.ToLower(hostport)
	}))
}

// crossSite says why a state-changing or API request comes from another site (a page could fire a
// costly read blind, with no token on loopback), or "" when not: Sec-Fetch-Site must be same-origin
// or none, and an Origin must name this host. Clients that are not browsers send neither and pass.
func crossSite(r *http.Request) string {
	if sfs := r.Header.Get("Sec-Fetch-Site"); sfs != "" && sfs != "same-origin" && sfs != "none" {
		return "Sec-Fetch-Site is " + clip(sfs)
	}
	if o := r.Header.Get("Origin"); o != "" {
		if o == "null" && r.Header.Get("Sec-Fetch-Site") == "same-origin" {
			// A form posted from a page of ours under a no-referrer policy (an older page, a
			// browser's own setting): the browser vouches for the origin.
			return ""
		}
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return "Origin " + clip(o) + " is not " + clip(r.Host)
		}
	}
	return ""
}

// sessions are the dashboard's sign-ins: random ids with an expiry.
type sessions struct {
	mu sync.Mutex
	m  map[string]time.Time
}

func (ss *sessions) create() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	id := hex.EncodeToString(b[:])
	now := time.Now()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	maps.DeleteFunc(ss.m, func(_ string, exp time.Time) bool { return now.After(exp) })
	for len(ss.m) >= maxSessions { // the oldest go first
		delete(ss.m, slices.MinFunc(slices.Collect(maps.Keys(ss.m)), func(a, b string) int { return ss.m[a].Compare(ss.m[b]) }))
	}
	ss.m[id] = now.Add(sessionTTL)
	return id, nil
}

func (ss *sessions) valid(id string) bool {
	if len(id) != 64 {
		return false
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	exp, ok := ss.m[id]
	return ok && !time.Now().After(exp) // create forgets the expired
}

func (ss *sessions) remove(id string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.m, id)
}

// limiter counts failed sign-ins per address: a token bucket of failBurst, one back per failRefill.
type limiter struct {
	mu sync.Mutex
	m  map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

// spend takes one of addr's failures before its guess is checked, so that guesses in flight at once
// count together (a check, then a count after the verdict, let each pass while failures were left);
// false when none is left, and how long until one is. refund gives it back for a right guess.
func (l *limiter) spend(addr string) (bool, time.Duration) {
	addr = limitKey(addr)
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.m[addr]
	if b == nil {
		if len(l.m) >= maxLimited { // forget the full buckets, then any
			maps.DeleteFunc(l.m, func(_ string, v *bucket) bool {
				l.refill(v)
				return v.tokens >= failBurst
			})
			for k := range l.m {
				if len(l.m) < maxLimited {
					break
				}
				delete(l.m, k)
			}
		}
		b = &bucket{tokens: failBurst, last: time.Now()}
		l.m[addr] = b
	}
	l.refill(b)
	if b.tokens < 1 {
		return false, time.Duration((1 - b.tokens) * float64(failRefill))
	}
	b.tokens--
	return true, 0
}

func (l *limiter) refund(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.m[limitKey(addr)]; b != nil {
		b.tokens = min(failBurst, b.tokens+1)
	}
}

func (l *limiter) refill(b *bucket) {
	now := time.Now()
	b.tokens = min(failBurst, b.tokens+float64(now.Sub(b.last))/float64(failRefill))
	b.last = now
}

// limitKey is what a client's failures count against: its address, or
// an IPv6 client's /64, whose every address a host may use.
func limitKey(addr string) string {
	if ip, err := netip.ParseAddr(addr); err == nil && ip.Is6() && !ip.Is4In6() {
		addr = netip.PrefixFrom(ip, 64).Masked().String()
	}
	return addr
}

// remoteIP is the client's address without its port (one bucket per host, whatever its port).
func remoteIP(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

// tooMany answers a client that has used up its failed sign-ins.
func tooMany(w http.ResponseWriter, wait time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(int(wait/time.Second)+1))
	writeError(w, http.StatusTooManyRequests, "too many failed sign-ins from this address: wait and try again")
}

// tokenEqual compares digests, which have one length: comparing the tokens would end early when
// their lengths differ, and the time taken tell the token's length.
func tokenEqual(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return got != "" && subtle.ConstantTimeCompare(g[:], w[:]) == 1
}
