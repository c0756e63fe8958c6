package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// adminClient talks to a running orderstore's admin API.
type adminClient struct {
	base  string
	token string
	hc    *http.Client
}

// clientFlags adds -admin, -token and -config to fs; resolve() picks, in order: the flags,
// $ORDERSTORE_ADMIN_URL / $ORDERSTORE_ADMIN_TOKEN, the config's [admin] section, the default.
func clientFlags(fs *flag.FlagSet) func() (*adminClient, error) {
	url := fs.String("admin", "", "admin URL (default: $ORDERSTORE_ADMIN_URL, else from -config, else http://127.0.0.1:8222)")
	token := fs.String("token", "", "admin bearer token (default: $ORDERSTORE_ADMIN_TOKEN, else from -config)")
	configPath := fs.String("config", "", "read [admin] listen and token from this config file (default: $ORDERSTORE_CONFIG)")
	return func() (*adminClient, error) {
		c := &adminClient{base: cmp.Or(*url, os.Getenv("ORDERSTORE_ADMIN_URL")), token: cmp.Or(*token, os.Getenv("ORDERSTORE_ADMIN_TOKEN")),
			hc: &http.Client{Timeout: 30 * time.Second}}
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
				c.base = either(cfg.Admin.TLS.CertFile != "", "https://", "http://") + net.JoinHostPort(host, port)
				if t := cfg.Admin.TLS; t.CertFile != "" {
					// HTTPS, trusting the listener's own certificate (a self-signed one too).
					pool, err := x509.SystemCertPool()
					if err != nil {
						pool = x509.NewCertPool()
					}
					if pem, err := os.ReadFile(t.CertFile); err == nil {
						pool.AppendCertsFromPEM(pem)
					}
					c.hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
				}
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
	return c.send(context.Background(), method, path, nil, out)
}

// apiError is the admin API's refusal of a request: its HTTP status and the error it gave.
type apiError struct {
	Method, Path string
	Code         int    // 409
	Status       string // "409 Conflict"
	Msg          string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("admin %s %s: %s: %s", e.Method, e.Path, e.Status, e.Msg)
}

// statusOf is the HTTP status of the admin API's refusal in err's chain (0: none).
func statusOf(err error) int {
	if e := (*apiError)(nil); errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// send sends a request (a POST's body: in as JSON, "{}" when nil) and decodes the answer into out,
// or hands a func(io.Reader) error out the answer's body; ctx ends the wait for it.
func (c *adminClient) send(ctx context.Context, method, path string, in, out any) error {
	var reqBody io.Reader
	if method == http.MethodPost {
		data, err := json.Marshal(cmp.Or(in, any(struct{}{}))) // nil: "{}"
		if err != nil {
			return err
		}
		reqBody = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, reqBody)
	if err != nil {
		return err
	}
	if reqBody != nil {
		// The admin API takes state changes only as JSON, which a browser form cannot send.
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return withHint(fmt.Errorf("admin %s: %w", c.base, err), "is orderstore running? pass -admin URL (or -config FILE) to reach its admin listener")
	}
	defer resp.Body.Close()
	if read, ok := out.(func(io.Reader) error); ok && resp.StatusCode == http.StatusOK {
		return read(resp.Body) // a stream: a backup's tar
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusUnauthorized {
		return withHint(fmt.Errorf("admin %s%s: 401 unauthorized", c.base, path), "pass -token, set $ORDERSTORE_ADMIN_TOKEN, or -config with admin.token")
	}
	if resp.StatusCode >= 300 {
		var e struct{ Error, Hint string }
		json.Unmarshal(body, &e)
		err := &apiError{Method: method, Path: path, Code: resp.StatusCode, Status: resp.Status, Msg: cmp.Or(e.Error, strings.TrimSpace(string(body)))}
		if e.Hint != "" {
			return withHint(err, e.Hint)
		}
		if resp.StatusCode == http.StatusServiceUnavailable {
			// Not an answer: the appliance is starting (recovering its streams), no data yet.
			return withHint(err, "orderstore is starting or recovering its streams; retry in a moment (GET /readyz says when it is ready)")
		}
		return err
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("admin %s %s: %s: %w", method, path, resp.Status, err)
	}
	return nil
}
