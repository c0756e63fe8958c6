package config

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/orderstore/orderstore"
)

// FuzzParse feeds arbitrary text to Parse. Whatever the input, Parse does
// not panic; an accepted file validates and survives Encode and Parse again
// (the `check -print` round trip); a rejected one names the file.
//
// Seeds: the example file, the snippets of TestParseErrors and
// TestParseValues, and edge cases of sizes, durations, escapes and users;
// inputs the fuzzer found interesting are in testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	example, err := os.ReadFile("../../orderstore.example.toml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(example))
	for _, s := range []string{
		"",
		"[stream]\nmax_agee = \"1h\"\n[admin]\nadress = \"x\"\n[bogus]\nx = 1\n",
		"[stream]\nmax_age = \"72\"\n",
		"[processor]\nack_wait = 30\n",
		"[jetstream]\nmax_file_store = \"10XB\"\n",
		"[stream]\nmax_bytes = \"1GB\"\n",
		"[stream]\nmax_bytes = \"1024\"\n",
		"[server]\nport = \"x\"\n",
		"[stream]\nmax_age = \"72\"\ndiscard = \"oldest\"\n[processor]\nmax_deliver = 0\n",
		"[jetstream]\nmax_file_store = \"1GiB\"\n[stream]\nmax_bytes = \"2GiB\"\n",
		"[processor]\nmax_deliver = 2\nbackoff = [\"1s\", \"2s\"]\n",
		"[processor]\nmax_deliver = -1\n",
		"[jetstream]\nsync_interval = \"sometimes\"\n",
		"[server]\nhost = \"0.0.0.0\"\n",
		"[admin]\nlisten = \"0.0.0.0:8222\"\n",
		"[stream]\nreplicas = 3\n",
		"stream = 1\n",
		"[stream]\nmax_age = \"1m\"\nduplicate_window = \"2m\"\n",
		"[stream]\nsubjects = [\"orders.>.x\"]\n",
		"[log]\nlevel = \"verbose\"\n",
		"[processor]\ndead_letter_stream = \"ORDER_EVENTS\"\n",
		"[stream]\nmax_msg_size = \"2MiB\"\n",
		"[stream]\nmax_age = \n",
		"[processor]\nbackoff = []\n[stream]\nmax_bytes = \"0.5KiB\"\nmax_age = \"1.5h\"\n",
		"[jetstream]\ndisk_headroom = \"NaNB\"\nmax_memory_store = \"8EiB\"\nsync_interval = \"ALWAYS\"\n",
		"[server]\nname = \"a\\u007f\\\"b\"\nsystem_user = \"sys\"\nsystem_password = \"x\"\n[log]\nlevel = \"DEBUG\"\n",
		"[[server.users]]\nuser = \"a\"\npassword = \"b\"\npublish = []\nsubscribe = [\"_INBOX.>\"]\n[[server.users]]\nuser = \"c\"\npassword = \"d\"\nbogus = 1\n",
		"[admin]\nlisten = \"[::1]:0\"\ntoken = \"t\"\n",
		"[jetstream]\nsync_interval = \"1s\"\nmax_file_store = \"1.5GiB\"\n[stream]\nmax_age = \"72h\"\nmax_bytes = \"-1\"\n" +
			"[[server.users]]\nuser = \"producer\"\npassword = \"p\"\npublish = [\"orders.>\"]\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cfg, err := Parse(strings.NewReader(s), "fuzz.toml")
		if err != nil {
			if !strings.HasPrefix(err.Error(), `config "fuzz.toml": `) {
				t.Fatalf("Parse error %q does not name the file", err)
			}
			return
		}
		if err := cfg.validate(); len(err) > 0 {
			t.Fatalf("Parse accepted a config that does not validate: %v", err)
		}
		b, err := cfg.Encode()
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		back, err := Parse(strings.NewReader(string(b)), "printed")
		if err != nil {
			t.Fatalf("printed config does not parse: %v\n%s", err, b)
		}
		want := cfg.Redacted()
		normalizeEmpty(&want)
		normalizeEmpty(&back)
		if !reflect.DeepEqual(back, want) {
			t.Fatalf("round trip differs:\n got %+v\nwant %+v\nprinted:\n%s", back, want, b)
		}
	})
}

// normalizeEmpty makes the empty user list non-nil: the encoder omits an
// empty array of tables, so `users = []` comes back as absent (as in
// TestEncodeRoundTrip). The other lists are written even when empty.
func normalizeEmpty(c *Config) {
	if c.Server.Users == nil {
		c.Server.Users = []User{}
	}
	if c.LeafNode.Remotes == nil {
		c.LeafNode.Remotes = []orderstore.LeafRemote{}
	}
	if c.LeafNode.Users == nil {
		c.LeafNode.Users = []orderstore.LeafUser{}
	}
}
