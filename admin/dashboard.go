package admin

import (
	"bytes"
	"embed"
	"io/fs"
	"net/http"
)

//go:embed ui
var uiFiles embed.FS

func uiFS() fs.FS {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // the embed pattern above guarantees the directory
	}
	return sub
}

// dashboard serves the live dashboard: plain HTML, CSS and JS embedded in
// the binary, no build step. It polls /v1/status and /v1/dlq.
func (s *Server) dashboard(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	page, err := fs.ReadFile(uiFS(), "index.html")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if s.cfg.Token != "" {
		// Signed in with the token: a session to sign out of.
		page = bytes.Replace(page, []byte(` id="logout" hidden>`), []byte(` id="logout">`), 1)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(page)
}
