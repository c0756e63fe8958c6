package main

import (
	"io"
	"log/slog"
	"os"
)

// newLogger builds the one handler of the process: text on a terminal, JSON
// otherwise, unless format says which.
func newLogger(w io.Writer, level, format string) *slog.Logger {
	var lv slog.Level // info unless level (debug, info, warn or error: validated) says otherwise
	lv.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: lv}
	if format == "json" || (format == "auto" && !isTerminal(w)) {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func isTerminal(w io.Writer) bool {
	if f, ok := w.(*os.File); ok {
		st, err := f.Stat()
		return err == nil && st.Mode()&os.ModeCharDevice != 0
	}
	return false
}
