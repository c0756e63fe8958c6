package main

import (
	"cmp"
	"errors"
	"io/fs"
	"os"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/internal/config"
)

// loadConfig resolves the config path (flag, then $ORDERSTORE_CONFIG, then
// none) and loads it. With no path it returns the built-in defaults.
func loadConfig(flagPath string) (cfg config.Config, name string, err error) {
	path := cmp.Or(flagPath, os.Getenv("ORDERSTORE_CONFIG"))
	if path == "" {
		return config.Default(), "<built-in defaults>", nil
	}
	cfg, err = config.Load(path)
	if _, invalid := errors.AsType[*orderstore.ValidationError](err); invalid {
		return cfg, path, withHint(err, "fix the keys above; orderstore.example.toml lists every key with its default")
	} else if errors.Is(err, fs.ErrNotExist) {
		return cfg, path, withHint(err, "pass an existing file with -config (or run without -config for the built-in defaults)")
	}
	return cfg, path, err
}
