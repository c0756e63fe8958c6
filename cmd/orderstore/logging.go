package main

import (
	"io"
	"log/slog"
	"os"
	"strings"
)

// newLogger builds the one handler of the process: text on a terminal, JSON
// otherwise, unless format says which.
func newLogger(w io.Writer, level, format string) *slog.Logger {
	var lv slog.Level // info unless level says otherwise
	switch strings.ToLower(level) {
	case "debug":
		lv = slog.LevelDebug
	case "warn":
		lv = slog.LevelWarn
	case "error":
		lv = slog.LevelError
	}
	opts := &slog.HandlerOptions{Level: lv}
	if format == "json" || (format == "auto" && !isTerminal(w)) {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
