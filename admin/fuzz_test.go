package admin

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const fuzzToken = "s3cret"

// FuzzAdminRequest serves arbitrary requests (method, path, query, with or
// without an admin token configured, with any Authorization header) to a
// Server that has no backend yet, as during start-up. Whatever the
// request, the server does not panic and answers with a valid status code;
// the data API under /v1/ answers 503 (no backend) or a 4xx, never data; a
// JSON response is valid JSON; and with a token configured, nothing but
// /livez answers 2xx without it.
//
// A request target that httptest.NewRequest would refuse (an invalid
// method, a malformed URL) is no input: the function returns at once.
// net/http's ServeMux answers a path that is not clean ("/v1//status",
// "/v1/./dlq") with a redirect to the cleaned path: that redirect is
// followed once and the invariants are checked on where it leads.
func FuzzAdminRequest(f *testing.F) {
	for _, s := range []struct {
		method, path, query string
		withToken           bool
		authorization       string
	}{
		{"GET", "/livez", "", false, ""},
		{"GET", "/readyz", "", true, ""},
		{"GET", "/metrics", "", false, ""},
		{"GET", "/metrics", "", true, "Bearer s3cret"},
		{"GET", "/v1/status", "", false, ""},
		{"GET", "/v1/status", "", true, "Bearer wrong"},
		{"GET", "/v1/status", "", true, "Bearer s3cret"},
		{"GET", "/v1/orders/o-1", "", false, ""},
		{"GET", "/v1/orders/a%2Fb", "", true, "Bearer s3cret"},
		{"GET", "/v1/orders/", "", false, ""},
		{"GET", "/v1/dlq", "limit=5&from=3", false, ""},
		{"GET", "/v1/dlq", "latest&limit=0", true, "Bearer s3cret"},
		{"POST", "/v1/dlq/7/replay", "", false, ""},
		{"POST", "/v1/dlq/0/replay", "", true, "Bearer s3cret"},
		{"DELETE", "/v1/dlq/7/replay", "", false, ""},
		{"HEAD", "/v1/status", "", false, ""},
		{"OPTIONS", "*", "", false, ""},
		{"CONNECT", "/v1/status", "", false, ""},
		{"GET", "/v1//status", "", false, ""},
		{"GET", "/v1/../livez", "", true, ""},
		{"GET", "http://example.com/v1/status", "", false, ""},
		{"POST", "/login", "token=s3cret", true, ""},
		{"POST", "/login", "token=wrong", true, ""},
		{"POST", "/login", "", false, ""},
		{"GET", "/", "", true, "Bearer s3cret"},
		{"GET", "/ui/app.js", "", false, ""},
		{"GET", "/ui/../index.html", "", false, ""},
		{"GET", "/ui", "", true, ""},
		{"GET", "/nope", "", false, ""},
	} {
		f.Add(s.method, s.path, s.query, s.withToken, s.authorization)
	}
	open := New(testConfig())
	cfg := testConfig()
	cfg.Token = fuzzToken
	guarded := New(cfg)

	f.Fuzz(func(t *testing.T, method, target, query string, withToken bool, authorization string) {
		if query != "" {
			target += "?" + query
		}
		if !validRequest(method, target) || strings.ContainsAny(authorization, "\r\n") {
			return
		}
		s := open
		if withToken {
			s = guarded
		}
		authorized := !withToken || authorization == "Bearer "+fuzzToken
		req := httptest.NewRequest(method, target, nil)
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		rec := serve(t, s, req, authorized)
		if !isRedirect(rec.Code) {
			return
		}
		// ServeMux's redirect to the clean path (or to "/ui/"): follow
		// it once; under /v1 it must not redirect again.
		loc := rec.Header().Get("Location")
		if !validRequest(method, loc) {
			t.Fatalf("%s %s: %d to %q, which is not a valid request target", method, target, rec.Code, loc)
		}
		next := httptest.NewRequest(method, loc, nil)
		next.Header = req.Header.Clone()
		if rec := serve(t, s, next, authorized); isRedirect(rec.Code) && isV1(next.URL.Path) {
			t.Fatalf("%s %s: redirected twice, to %q and %q", method, target, loc, rec.Header().Get("Location"))
		}
	})
}

func isRedirect(code int) bool {
	return code == http.StatusMovedPermanently || code == http.StatusTemporaryRedirect || code == http.StatusPermanentRedirect
}

func isV1(p string) bool { return p == "/v1" || strings.HasPrefix(p, "/v1/") }

// serve serves req and checks the invariants on the response.
func serve(t *testing.T, s *Server, req *http.Request, authorized bool) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	what := req.Method + " " + req.RequestURI
	code := rec.Code
	if code < 100 || code > 599 {
		t.Fatalf("%s: status %d is not a valid HTTP status code", what, code)
	}
	p := req.URL.Path
	if isV1(p) && code != http.StatusServiceUnavailable && (code < 400 || code > 499) && !isRedirect(code) {
		t.Fatalf("%s without a backend: status %d, want 503 or 4xx\n%s", what, code, rec.Body)
	}
	if !authorized && code >= 200 && code <= 299 && p != "/livez" {
		t.Fatalf("%s without the token: status %d, want 401\n%s", what, code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); strings.HasPrefix(ct, "application/json") && !json.Valid(rec.Body.Bytes()) {
		t.Fatalf("%s: status %d, Content-Type %q, but the body is not JSON: %q", what, code, ct, rec.Body)
	}
	return rec
}

// validRequest reports whether httptest.NewRequest accepts method and
// target: it parses exactly this request line, and panics where
// http.ReadRequest fails. Line breaks are refused first: they would add
// header lines instead of being part of the target.
func validRequest(method, target string) bool {
	if strings.ContainsAny(method, "\r\n") || strings.ContainsAny(target, "\r\n") {
		return false
	}
	if method == "" {
		method = http.MethodGet
	}
	_, err := http.ReadRequest(bufio.NewReader(strings.NewReader(method + " " + target + " HTTP/1.0\r\n\r\n")))
	return err == nil
}
