package main

import (
	"os"

	"github.com/orderstore/orderstore/internal/config"
)

// loadConfig resolves the config path (flag, then $ORDERSTORE_CONFIG, then
// none) and loads it. With no path it returns the built-in defaults.
func loadConfig(flagPath string) (cfg config.Config, name string, err error) {
	path := flagPath
	if path == "" {
		path = os.Getenv("ORDERSTORE_CONFIG")
	}
	if path == "" {
		return config.Default(), "<built-in defaults>", nil
	}
	cfg, err = config.Load(path)
	if err != nil {
		return cfg, path, withHint(err, "fix the keys above; orderstore.example.toml lists every key with its default")
	}
	return cfg, path, nil
}

type configT = config.Config
