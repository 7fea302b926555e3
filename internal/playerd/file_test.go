package playerd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/augur-log/augur/internal/auth"
	"github.com/augur-log/augur/internal/config"
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

// TestStatusCert: on a secured cluster status_addr serves with the
// certificate status_cert names and the cluster CA; a secured cluster
// without status_cert, and status_cert where it secures nothing, are
// refused.
func TestStatusCert(t *testing.T) {
	secured := &config.Cluster{TLS: &config.TLS{Dir: "/certs"}}
	plaintext := &config.Cluster{Insecure: true}
	f := &File{StatusAddr: "127.0.0.1:7301", StatusCert: "p1"}
	got, err := f.StatusFiles(secured)
	want := auth.Files{CA: "/certs/ca.crt", Cert: "/certs/p1.crt", Key: "/certs/p1.key"}
	if err != nil || got != want {
		t.Fatalf("StatusFiles = %+v, %v; want %+v", got, err, want)
	}
	if _, err := (&File{StatusAddr: "127.0.0.1:7301"}).StatusFiles(secured); err == nil || !strings.Contains(err.Error(), "status_cert") {
		t.Errorf("a secured cluster's status_addr without status_cert: %v", err)
	}
	if got, err := (&File{StatusAddr: "127.0.0.1:7301"}).StatusFiles(plaintext); err != nil || got != (auth.Files{}) {
		t.Errorf("an insecure cluster's status: %+v, %v; want plaintext", got, err)
	}
	if _, err := f.StatusFiles(plaintext); err == nil {
		t.Error("status_cert with an insecure cluster was accepted")
	}
	_, err = LoadFile(writeFile(t, "cluster_id: x\nordering: [127.0.0.1:1]\ninsecure: true\nstatus_cert: p1\ntargets: [{name: a, addr: 127.0.0.1:2}]\n"))
	for _, want := range []string{"status_cert goes with status_addr"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %q", err, want)
		}
	}
	_, err = LoadFile(writeFile(t, "cluster_id: x\nordering: [127.0.0.1:1]\ninsecure: true\nstatus_addr: 127.0.0.1:3\nstatus_cert: p1\ntargets: [{name: a, addr: 127.0.0.1:2}]\n"))
	if err == nil || !strings.Contains(err.Error(), "needs cluster") {
		t.Errorf("status_cert without a cluster file: %v", err)
	}
}
