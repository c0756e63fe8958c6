package natsrun

import (
	"net/http"

	"github.com/orderstore/orderstore/natsserver/server"
)

// Monitoring is nats-server's own monitoring endpoints, by path, for the
// admin listener; until srv returns a server they answer 503.
func Monitoring(srv func() *server.Server) map[string]http.HandlerFunc {
	handlers := map[string]http.HandlerFunc{}
	for path, h := range map[string]func(*server.Server, http.ResponseWriter, *http.Request){
		"/varz": (*server.Server).HandleVarz, "/jsz": (*server.Server).HandleJsz,
		"/connz": (*server.Server).HandleConnz, "/healthz": (*server.Server).HandleHealthz,
		"/subsz": (*server.Server).HandleSubsz, "/accountz": (*server.Server).HandleAccountz,
		"/leafz": (*server.Server).HandleLeafz, "/routez": (*server.Server).HandleRoutez,
	} {
		handlers[path] = func(w http.ResponseWriter, r *http.Request) {
			s := srv()
			if s == nil {
				http.Error(w, "starting", http.StatusServiceUnavailable)
				return
			}
			h(s, w, r)
		}
	}
	return handlers
}
