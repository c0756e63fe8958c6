//go:build !benchtrace

package ingest

// StagesOn says this build records where a publish's time goes.
const StagesOn = false
