package natsrun

import (
	"net/http"

	"github.com/orderstore/orderstore/natsserver/server"
)

// Monitoring is nats-server's own monitoring endpoints, by path, for the
// admin listener; until srv returns a server they answer 503.
func Monitoring(srv func() *server.Server) map[string]http.HandlerFunc {
	wrap := func(h func(*server.Server) http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			s := srv()
			if s == nil {
				http.Error(w, "starting", http.StatusServiceUnavailable)
				return
			}
			h(s)(w, r)
		}
	}
	return map[string]http.HandlerFunc{
		"/varz":     wrap(func(s *server.Server) http.HandlerFunc { return s.HandleVarz }),
		"/jsz":      wrap(func(s *server.Server) http.HandlerFunc { return s.HandleJsz }),
		"/connz":    wrap(func(s *server.Server) http.HandlerFunc { return s.HandleConnz }),
		"/healthz":  wrap(func(s *server.Server) http.HandlerFunc { return s.HandleHealthz }),
		"/subsz":    wrap(func(s *server.Server) http.HandlerFunc { return s.HandleSubsz }),
		"/accountz": wrap(func(s *server.Server) http.HandlerFunc { return s.HandleAccountz }),
		"/leafz":    wrap(func(s *server.Server) http.HandlerFunc { return s.HandleLeafz }),
		"/routez":   wrap(func(s *server.Server) http.HandlerFunc { return s.HandleRoutez }),
	}
}
