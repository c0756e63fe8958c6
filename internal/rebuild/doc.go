// Package rebuild rebuilds a projection without downtime: it folds the
// stream into a shadow projection while the live processor goes on, and
// once the shadow has caught up, pauses the live processor, folds the last
// events, hands the shadow's state over to the live projection and resumes
// the live processor. Events the live processor dead-lettered are not
// folded.
//
// A [Runner] runs one rebuild at a time: Start asks for one, Run folds it
// and takes over, Status reports it and Cancel stops it. A [Target] is
// what it folds into and hands over to; [Buckets] is the built-in
// projection's, shadow buckets copied into the live ones.
//
// Its position is durable (a state file, written after the shadow's
// writes were made durable): a rebuild interrupted by a restart, a kill -9
// or a power cut goes on from there, and a takeover interrupted half-way
// is finished at the next start before the processor runs.
package rebuild
