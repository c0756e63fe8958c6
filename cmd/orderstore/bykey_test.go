package main

import (
	"strings"
	"testing"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/status"
)

// A problem Start finds (a node name another node of the cluster has) is
// restated by the file's keys, through the key table, naming the file.
func TestByKeyNamesTheFilesKeys(t *testing.T) {
	err := byKey(&orderstore.ValidationError{Problems: []*orderstore.FieldError{
		{Field: "Server.Name", Value: `"n1"`, Reason: "node n2 of cluster orders has it too"},
		{Field: "Server.Users[1].Name", Reason: "is reserved"},
		{Field: "Admin.IdleTimeout", Reason: "a field the file has no key for"},
	}}, "/etc/orderstore.toml")
	msg := err.Error()
	for _, want := range []string{"config /etc/orderstore.toml: 3 problems", `server.name = "n1": node n2`, "server.users[1].user: is reserved", "Admin.IdleTimeout: a field"} {
		if !strings.Contains(msg, want) {
			t.Errorf("byKey = %q, want it to contain %q", msg, want)
		}
	}
}

// A build from a checkout says dev and its commit; a release its tag.
func TestVersionText(t *testing.T) {
	for _, c := range []struct {
		b    status.BuildInfo
		want string
	}{
		{status.BuildInfo{Version: "dev", Commit: "0123456789abcdef0123"}, "dev (commit 0123456789ab)"},
		{status.BuildInfo{Version: "dev", Commit: "unknown"}, "dev"},
		{status.BuildInfo{Version: "v1.4.0", Commit: "0123456789abcdef0123"}, "v1.4.0"},
	} {
		if got := versionText(c.b); got != c.want {
			t.Errorf("versionText(%+v) = %q, want %q", c.b, got, c.want)
		}
	}
}
