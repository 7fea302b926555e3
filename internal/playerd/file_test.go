package playerd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/augur-log/augur/internal/player"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "player.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLoadFile: a full file sets the routing, bounds and timeouts, and a
// relative cluster path is taken from the file's directory.
func TestLoadFile(t *testing.T) {
	p := writeFile(t, `cluster: c.yaml
route: tags
batch_entries_max: 7
empty_every: 9
ack_timeout: 3s
targets:
  - {name: a, addr: 127.0.0.1:1}
  - {name: b, addr: 127.0.0.1:2}
`)
	f, err := LoadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.Config()
	if err != nil {
		t.Fatal(err)
	}
	if f.Cluster != filepath.Join(filepath.Dir(p), "c.yaml") || c.Core.Route != player.RouteTags ||
		c.Core.BatchEntriesMax != 7 || c.Core.EmptyEvery != 9 || c.AckTimeout != 3*time.Second || len(c.Targets) != 2 {
		t.Fatalf("loaded %+v as %+v", f, c)
	}
}

// TestLoadFileErrors: every problem of a file is reported at once, and
// unknown fields are refused.
func TestLoadFileErrors(t *testing.T) {
	_, err := LoadFile(writeFile(t, `route: sideways
ack_timeout: soon
targets:
  - {name: a}
  - {name: a, addr: x:1}
`))
	for _, want := range []string{"route", "ack_timeout", "name the cluster", "no addr", "listed twice"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %q", err, want)
		}
	}
	if _, err := LoadFile(writeFile(t, "clusterr: x\n")); err == nil {
		t.Error("an unknown field was accepted")
	}
}
