package orderstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/bootstrap"
	"github.com/orderstore/orderstore/internal/bytesize"
	"github.com/orderstore/orderstore/internal/durable"
	"github.com/orderstore/orderstore/internal/ingest"
	"github.com/orderstore/orderstore/internal/rebuild"
	"github.com/orderstore/orderstore/internal/storedir"
	"github.com/orderstore/orderstore/processor"
	"github.com/orderstore/orderstore/status"
)

// Errors of [Appliance.RebuildProjection] and [Appliance.CancelRebuild].
var (
	// ErrRebuildRunning: a rebuild is already under way.
	ErrRebuildRunning = rebuild.ErrRunning
	// ErrNoRebuild: there is no rebuild to cancel.
	ErrNoRebuild = rebuild.ErrNotRunning
	// ErrRebuildTakingOver: the rebuild is in its takeover, which cannot be canceled.
	ErrRebuildTakingOver = rebuild.ErrTakingOver
	// ErrRebuildUnsupported: this appliance cannot rebuild its projection
	// (a custom Processor.Handler that is not a processor.Rebuilder).
	ErrRebuildUnsupported = errors.New("the projection cannot be rebuilt here")
	// ErrRebuildNoRoom: the storage budget cannot hold the shadow beside
	// the live projection (the error gives the numbers).
	ErrRebuildNoRoom = errors.New("no room for the rebuild's shadow projection")
	// ErrRebuildBadRequest: options that cannot be met (from_seq past the
	// stream's end, from_seq and from_time together).
	ErrRebuildBadRequest = rebuild.ErrBadRequest
)

// rebuildStateFile and projectionStateFile are in the store directory: the rebuild's durable
// position, and the version the projection was built with.
const (
	rebuildStateFile    = "rebuild.json"
	projectionStateFile = "projection.json"
)

// shadowSuffix names the shadow bucket: "<bucket>_REBUILD" (and its
// history index "<bucket>_REBUILD_HISTORY").
const shadowSuffix = "_REBUILD"

// The shapes of a projection rebuild, as POST /v1/projection/rebuild takes and answers them.
type (
	// RebuildRequest is what a rebuild is asked: where its fold starts (all optional).
	RebuildRequest = status.RebuildRequest
	// Rebuild is a rebuild's state and progress.
	Rebuild = status.Rebuild
)

// RebuildProjection starts rebuilding the projection from the stream, in the background: the fold
// runs into a shadow projection while the live processor goes on, and the shadow takes over once it
// has caught up (docs/rebuild.md). It returns at once with the rebuild's state; follow it with
// [Appliance.RebuildStatus].
func (a *Appliance) RebuildProjection(ctx context.Context, req RebuildRequest) (*Rebuild, error) {
	if a.rebuild == nil {
		return nil, a.rebuildUnsupported
	}
	return a.rebuild.Start(ctx, rebuild.Options{FromSeq: req.FromSeq, FromTime: req.FromTime, ReplacePartial: req.ReplacePartial})
}

// RebuildStatus returns the rebuild under way or the last one (nil: none ran on this store).
func (a *Appliance) RebuildStatus() *Rebuild {
	if a.rebuild == nil {
		return nil
	}
	return a.rebuild.Status()
}

// CancelRebuild stops the rebuild under way and drops its shadow; the live projection stays as is.
func (a *Appliance) CancelRebuild() error {
	if a.rebuild == nil {
		return ErrNoRebuild
	}
	return a.rebuild.Cancel()
}

// openRebuild sets up the rebuild runner and finishes a takeover a stop
// interrupted, before the processor runs.
func (a *Appliance) openRebuild(ctx context.Context) error {
	cfg := a.cfg
	var target rebuild.Target
	if v, ok := cfg.Processor.Handler.(processor.Versioned); ok {
		a.handlerVersion = v.Version()
	}
	switch h := cfg.Processor.Handler.(type) {
	case nil:
		a.handlerVersion = processor.ProjectionVersion
		target = a.bucketsTarget()
	case processor.Rebuilder:
		target = handlerTarget{h}
	default:
		a.rebuildUnsupported = fmt.Errorf("%w: the custom Processor.Handler does not implement processor.Rebuilder", ErrRebuildUnsupported)
		return nil
	}
	rc := rebuild.Config{
		JS: a.pjs, Stream: a.spec.ConsumerStream(), DeadLetterStream: cfg.Processor.DeadLetterStream,
		// This node's own replays, as admission stores their ids.
		ReplayMsgID: ingest.ScopedMsgID(cfg.msgIDScope(), StreamAccount, processor.ReplayMsgIDPrefix(cfg.Processor.DeadLetterStream)),
		StatePath:   filepath.Join(a.report.StoreDir, rebuildStateFile), Target: target, Version: a.handlerVersion,
		Pause: a.pauseProcessor, Check: a.rebuildBudget, Log: a.log.With("component", "rebuild"), Pace: cfg.rebuildPace,
		Done:       func(st *status.Rebuild) error { return a.recordVersion(st.Version) },
		SyncSource: func(ctx context.Context) error { return a.syncStreams(ctx, a.spec.ConsumerStream()) },
	}
	if cfg.Cluster.Enabled() {
		rc.Claim, rc.Release = a.claimRebuild, a.releaseRebuild // one node at a time (rebuildcluster.go)
	}
	if cfg.rebuildPace > 0 {
		rc.BatchSize = 1000 // tests: small steps, each followed by the pace
	}
	r, err := rebuild.New(rc)
	if err != nil {
		return err
	}
	a.rebuild = r
	if r.TakeoverPending() {
		if err := r.FinishTakeover(ctx); err != nil {
			return fmt.Errorf("projection rebuild: finishing the takeover a stop interrupted: %w", err)
		}
	}
	if err := r.Cleanup(ctx); err != nil {
		a.log.Warn("projection rebuild: dropping a shadow left by a crash", "err", err)
	}
	if cfg.Cluster.Enabled() {
		// The claim and the durable's pause as this node left them.
		// The cluster may still be electing leaders while its nodes start.
		return a.clusterRetry(ctx, "projection rebuild claim", a.reconcileRebuildClaim)
	}
	return nil
}

// runRebuild runs the rebuild runner (after the processor: it stops first), which goes on with a
// fold under way, and starts one when the handler's version changed.
func (a *Appliance) runRebuild(context.Context) error {
	if err := a.checkVersion(a.handlerVersion, a.rebuild != nil); err != nil || a.rebuild == nil {
		return err
	}
	a.sup.add(component{name: "projection rebuild", run: a.rebuild.Run})
	return nil
}

// projectionState is projection.json.
type projectionState struct {
	Version string `json:"version"`
}

// checkVersion compares the handler's version with the one the projection was built with, records
// it the first time, and starts a rebuild (canRebuild) when it changed.
func (a *Appliance) checkVersion(version string, canRebuild bool) error {
	if version == "" {
		return nil
	}
	path := filepath.Join(a.report.StoreDir, projectionStateFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return a.recordVersion(version)
	}
	if err != nil {
		return fmt.Errorf("projection state %q: %w", path, err)
	}
	var ps projectionState
	if err := json.Unmarshal(data, &ps); err != nil {
		a.log.Warn("projection state unreadable; taking the handler's version as the projection's", "path", path, "err", err)
		return a.recordVersion(version)
	}
	if ps.Version == version {
		return nil
	}
	if !canRebuild {
		a.log.Warn("the handler's version changed, but this appliance cannot rebuild its projection: it stays as the old version built it",
			"was", ps.Version, "now", version, "why", a.rebuildUnsupported)
		return nil
	}
	if st := a.rebuild.Status(); st.Running() {
		return nil // under way already (its end records the version)
	}
	reason := fmt.Sprintf("the handler's version changed from %q to %q", ps.Version, version)
	if _, err := a.rebuild.Start(context.Background(), rebuild.Options{Reason: reason}); errors.Is(err, ErrRebuildRunning) && a.cfg.Cluster.Enabled() {
		// Another node rebuilds the cluster's projection: recorded only if with this version's fold
		// (in a rolling upgrade it may run the old one), else a later start rebuilds.
		if c, _, found, cerr := a.readClaim(context.Background()); cerr == nil && found && c.Version == version {
			a.log.Info("the handler's version changed; another node of the cluster is rebuilding the projection with it", "err", err)
			return a.recordVersion(version)
		}
		a.log.Warn("the handler's version changed; another node of the cluster is rebuilding the projection, not with this version: a later start rebuilds", "now", version, "err", err)
	} else if err != nil {
		a.log.Error("projection rebuild for a new handler version could not start; the projection stays as the old version built it", "err", err)
	}
	return nil
}

func (a *Appliance) recordVersion(version string) error {
	if version == "" {
		return nil
	}
	data, _ := json.Marshal(projectionState{Version: version})
	return durable.WriteFile(filepath.Join(a.report.StoreDir, projectionStateFile), append(data, '\n'), 0o640)
}

func (a *Appliance) bucketsTarget() *rebuild.Buckets {
	cfg := a.cfg
	shadow := *a.spec.Projection
	shadow.Bucket += shadowSuffix
	if cfg.Cluster.Enabled() {
		shadow.Bucket += "_" + nodeSuffix(cfg.Server.Name) // each node's own (rebuildcluster.go)
	}
	shadow.Description = "order projection being rebuilt (managed by orderstore; dropped after the takeover)"
	b := &rebuild.Buckets{JS: a.pjs, Live: cfg.Processor.ProjectionBucket, ShadowBucket: shadow, Log: a.log.With("component", "rebuild"),
		Reads: a.reads.Switch, Sync: a.syncStreams}
	if a.spec.History != nil {
		b.LiveHistory = cfg.Processor.HistoryBucket()
		b.ShadowHistory = cfg.historySpec(shadow.Bucket+"_HISTORY", cfg.historyMaxBytes())
		b.ShadowHistory.Description = "order history index being rebuilt (managed by orderstore)"
	}
	b.Projection = func(records, history jetstream.KeyValue) *processor.Projection {
		p := processor.NewProjection(a.pjs, records)
		if history != nil {
			p.SetHistory(history)
		}
		return p
	}
	b.Forget = func() {
		if p, ok := a.procHandler.(*processor.Projection); ok {
			p.ForgetAll()
		}
	}
	return b
}

// handlerTarget rebuilds a custom handler that is a processor.Rebuilder.
type handlerTarget struct{ processor.Rebuilder }

func (h handlerTarget) Durable(context.Context) error { return nil } // the handler's own storage
func (h handlerTarget) Takeover(ctx context.Context, _ *rebuild.Takeover) error {
	return h.Rebuilder.Takeover(ctx)
}
func (h handlerTarget) HighWater(context.Context) (uint64, error) { return 0, nil } // the handler's own storage

// syncStreams makes the streams' writes durable as the durability mode asks: nothing with group
// commit or "always" (nats acked each write once synced), an fsync of their files in "interval".
func (a *Appliance) syncStreams(ctx context.Context, streams ...string) error {
	if a.cfg.DurabilityMode() != DurabilityInterval {
		return nil
	}
	dir := storedir.Dir(a.report.StoreDir)
	var errs []error
	for _, s := range streams {
		if err := durable.SyncTree(dir.Stream(StreamAccount, s)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// rebuildBudget refuses a rebuild whose shadow the storage budget cannot
// hold beside the live projection: nats' reservation for the shadow
// bucket's max_bytes within jetstream.max_file_store, and the free disk.
func (a *Appliance) rebuildBudget(ctx context.Context) error {
	cfg := a.cfg
	buckets := []string{cfg.Processor.ProjectionBucket}
	if cfg.historyMaxBytes() > 0 {
		buckets = append(buckets, cfg.Processor.HistoryBucket())
	}
	var need uint64 // the live projection's records and history index
	for _, b := range buckets {
		s, err := a.js.Stream(ctx, "KV_"+b)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		need += s.CachedInfo().State.Bytes
	}
	// The shadow bucket reserves the live one's max_bytes; on disk, about what the live one stores.
	reserve := uint64(max(cfg.Processor.ProjectionMaxBytes, 0))
	// nats reserves a stream's max_bytes within the server's max_file_store when it is created.
	if srv := a.monitored.Load(); srv != nil && reserve > 0 {
		jsz, err := srv.Jsz(nil)
		if err != nil {
			return fmt.Errorf("rebuild: jetstream info: %w", err)
		}
		if max := jsz.Config.MaxStore; max > 0 {
			avail := max - min(max, int64(jsz.ReservedStore))
			if int64(reserve) > avail {
				return fmt.Errorf("%w: the shadow bucket reserves %s (processor.projection_max_bytes, as the live one), and jetstream.max_file_store (%s) has %s left beside what the streams reserve (%s); raise jetstream.max_file_store by %s, or lower processor.projection_max_bytes",
					ErrRebuildNoRoom, bytesize.Format(int64(reserve)), bytesize.Format(max), bytesize.Format(avail),
					bytesize.Format(int64(jsz.ReservedStore)), bytesize.Format(int64(reserve)-avail))
			}
		}
	}
	if free, err := bootstrap.FreeBytes(a.report.StoreDir); err == nil {
		if need+uint64(cfg.JetStream.DiskHeadroom) > free {
			return fmt.Errorf("%w: the shadow needs about %s of disk (the live projection's records and history index), and %s is free of which jetstream.disk_headroom keeps %s; free disk space under %s",
				ErrRebuildNoRoom, bytesize.Format(int64(need)), bytesize.Format(int64(free)), bytesize.Format(cfg.JetStream.DiskHeadroom), a.report.StoreDir)
		}
	}
	return nil
}

// pauseProcessor pauses the processor for a rebuild's takeover, logging the pause and the resume.
func (a *Appliance) pauseProcessor(ctx context.Context) (func(), error) {
	if a.pause == nil {
		return func() {}, nil
	}
	resumeAll := func() {}
	if a.cfg.Cluster.Enabled() {
		var err error
		if resumeAll, err = a.pauseEveryProcessor(ctx); err != nil {
			return nil, err
		}
	}
	resume, err := a.pause.Pause(ctx)
	if err != nil {
		resumeAll()
		return nil, err
	}
	a.log.Info("processor paused for the projection rebuild's takeover")
	return func() {
		resume()
		resumeAll()
		a.log.Info("processor resumed after the projection rebuild's takeover")
	}, nil
}

// rebuildCodes give a rebuild's refusals their HTTP status in the admin API.
var rebuildCodes = map[error]int{ErrRebuildRunning: http.StatusConflict, ErrNoRebuild: http.StatusConflict,
	ErrRebuildTakingOver: http.StatusConflict, ErrRebuildUnsupported: http.StatusNotImplemented,
	ErrRebuildNoRoom: http.StatusInsufficientStorage, ErrRebuildBadRequest: http.StatusBadRequest}
