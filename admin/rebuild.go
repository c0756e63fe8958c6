package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/orderstore/orderstore/status"
)

// Rebuild is the backend's projection rebuild.
type Rebuild interface {
	RebuildProjection(ctx context.Context, req status.RebuildRequest) (*status.Rebuild, error)
	RebuildStatus() *status.Rebuild
	CancelRebuild() error
}

// RebuildError gives a rebuild's refusal its HTTP status: 409 (one is
// under way, or none to cancel), 501 (not possible here), 507 (no room
// for the shadow).
type RebuildError struct {
	Code int
	Err  error
}

func (e *RebuildError) Error() string { return e.Err.Error() }
func (e *RebuildError) Unwrap() error { return e.Err }

func rebuildFail(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	var re *RebuildError
	if errors.As(err, &re) {
		code = re.Code
	}
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

// rebuildStart serves POST /v1/projection/rebuild: starts a rebuild
// (body: status.RebuildRequest, or empty) and answers 202 with its state.
func (s *Server) rebuildStart(w http.ResponseWriter, r *http.Request, b *Backend) {
	if b.Rebuild == nil {
		writeJSON(w, http.StatusNotImplemented, map[string]string{"error": "the projection cannot be rebuilt here"})
		return
	}
	var req status.RebuildRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, 4096))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	q := r.URL.Query()
	if len(body) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "the body must be a JSON object with from_seq, from_time (RFC 3339) and replace_partial, all optional: " + err.Error()})
			return
		}
	}
	if v := q.Get("from_seq"); v != "" {
		if req.FromSeq, err = strconv.ParseUint(v, 10, 64); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "from_seq must be a stream sequence number"})
			return
		}
	}
	if v := q.Get("from_time"); v != "" {
		if req.FromTime, err = time.Parse(time.RFC3339Nano, v); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "from_time must be an RFC 3339 time, e.g. 2026-12-01T00:00:00Z"})
			return
		}
	}
	if v := q.Get("replace_partial"); v != "" {
		if req.ReplacePartial, err = strconv.ParseBool(v); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "replace_partial must be true or false"})
			return
		}
	}
	if req.FromSeq > 0 && !req.FromTime.IsZero() {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "give from_seq or from_time, not both"})
		return
	}
	st, err := b.Rebuild.RebuildProjection(r.Context(), req)
	if err != nil {
		rebuildFail(w, err)
		return
	}
	s.log.Info("projection rebuild requested", "remote", remoteIP(r), "id", st.ID, "from_seq", req.FromSeq, "from_time", req.FromTime)
	writeJSON(w, http.StatusAccepted, st)
}

// rebuildGet serves GET /v1/projection/rebuild: the rebuild under way or
// the last one; 404 when none ran.
func (s *Server) rebuildGet(w http.ResponseWriter, r *http.Request, b *Backend) {
	var st *status.Rebuild
	if b.Rebuild != nil {
		st = b.Rebuild.RebuildStatus()
	}
	if st == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no projection rebuild has run on this store"})
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// rebuildCancel serves DELETE /v1/projection/rebuild.
func (s *Server) rebuildCancel(w http.ResponseWriter, r *http.Request, b *Backend) {
	if b.Rebuild == nil {
		writeJSON(w, http.StatusConflict, map[string]string{"error": "no projection rebuild is under way"})
		return
	}
	if err := b.Rebuild.CancelRebuild(); err != nil {
		rebuildFail(w, err)
		return
	}
	s.log.Info("projection rebuild cancel requested", "remote", remoteIP(r))
	writeJSON(w, http.StatusAccepted, b.Rebuild.RebuildStatus())
}
