package admin

import (
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
	http.ServeFileFS(w, r, uiFS(), "index.html")
}
