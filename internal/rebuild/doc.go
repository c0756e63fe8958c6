// Package rebuild rebuilds a projection without downtime: it folds the stream into a shadow
// projection while the live processor goes on, then pauses the live processor, folds the last
// events and hands the shadow's state over to the live projection (docs/rebuild.md, "The steps";
// its durable position: "Crashes and stops"). A [Runner] runs one rebuild at a time into a
// [Target]; [Buckets] is the built-in projection's.
package rebuild
