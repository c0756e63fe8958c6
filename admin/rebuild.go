package admin

import (
	"bytes"
	"context"
	"encoding/json"
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

// RebuildError gives a rebuild's refusal its HTTP status: 409 (one is under way, or none to
// cancel), 501 (not possible here), 507 (no room for the shadow).
type RebuildError struct {
	Code int
	Err  error
}

func (e *RebuildError) Error() string { return e.Err.Error() }
func (e *RebuildError) Unwrap() error { return e.Err }

// rebuildStart serves POST /v1/projection/rebuild: starts a rebuild
// (body: status.RebuildRequest, or empty) and answers 202 with its state.
func (s *Server) rebuildStart(w http.ResponseWriter, r *http.Request, b *Backend) error {
	if b.Rebuild == nil {
		return errorf(http.StatusNotImplemented, "the projection cannot be rebuilt here")
	}
	var req status.RebuildRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, 4096))
	if err != nil {
		return errorf(http.StatusBadRequest, "%s", err)
	}
	q := r.URL.Query()
	if len(body) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return errorf(http.StatusBadRequest, "the body must be a JSON object with from_seq, from_time (RFC 3339) and replace_partial, all optional: %s", err)
		}
	}
	if v := q.Get("from_seq"); v != "" {
		if req.FromSeq, err = strconv.ParseUint(v, 10, 64); err != nil {
			return errorf(http.StatusBadRequest, "from_seq must be a stream sequence number")
		}
	}
	if v := q.Get("from_time"); v != "" {
		if req.FromTime, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return errorf(http.StatusBadRequest, "from_time must be an RFC 3339 time, e.g. 2026-12-01T00:00:00Z")
		}
	}
	if v := q.Get("replace_partial"); v != "" {
		if req.ReplacePartial, err = strconv.ParseBool(v); err != nil {
			return errorf(http.StatusBadRequest, "replace_partial must be true or false")
		}
	}
	if req.FromSeq > 0 && !req.FromTime.IsZero() {
		return errorf(http.StatusBadRequest, "give from_seq or from_time, not both")
	}
	st, err := b.Rebuild.RebuildProjection(r.Context(), req)
	if err != nil {
		return err
	}
	s.log.Info("projection rebuild requested", "remote", remoteIP(r), "id", st.ID, "from_seq", req.FromSeq, "from_time", req.FromTime)
	return writeResult(w, http.StatusAccepted, st, nil)
}

// rebuildGet is GET /v1/projection/rebuild: the rebuild under way or the last; 404 when none ran.
func (s *Server) rebuildGet(w http.ResponseWriter, r *http.Request, b *Backend) error {
	if b.Rebuild != nil {
		if st := b.Rebuild.RebuildStatus(); st != nil {
			return writeResult(w, http.StatusOK, st, nil)
		}
	}
	return errorf(http.StatusNotFound, "no projection rebuild has run on this store")
}

// rebuildCancel serves DELETE /v1/projection/rebuild.
func (s *Server) rebuildCancel(w http.ResponseWriter, r *http.Request, b *Backend) error {
	if b.Rebuild == nil {
		return errorf(http.StatusConflict, "no projection rebuild is under way")
	}
	if err := b.Rebuild.CancelRebuild(); err != nil {
		return err
	}
	s.log.Info("projection rebuild cancel requested", "remote", remoteIP(r))
	return writeResult(w, http.StatusAccepted, b.Rebuild.RebuildStatus(), nil)
}
