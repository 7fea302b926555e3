package config

import (
	"strings"
	"testing"
	"time"
)

const lazyCluster = `
cluster_id: test
insecure: true
mode: lazy
ordering:
  - {id: o1, addr: 127.0.0.1:7101}
storage:
  - {id: a1, group: a, addr: 127.0.0.1:7201}
  - {id: a2, group: a, addr: 127.0.0.1:7202}
sequencing:
  - {id: q1, addr: 127.0.0.1:7301}
  - {id: q2, addr: 127.0.0.1:7302}
`

func TestLazyClusterFile(t *testing.T) {
	c, err := Parse([]byte(lazyCluster))
	if err != nil {
		t.Fatal(err)
	}
	if c.LazyBatchInterval.D() != DefaultLazyBatchInterval || c.LazyRingEntries != DefaultLazyRingEntries {
		t.Errorf("lazy defaults %v, %d", c.LazyBatchInterval, c.LazyRingEntries)
	}
	if role, err := c.Role("q2"); err != nil || role != RoleSequencing {
		t.Errorf("role of q2: %q, %v", role, err)
	}
	qc, err := c.SequencingConfig("q2", nil)
	if err != nil {
		t.Fatal(err)
	}
	if qc.ID != "q2" || len(qc.Replicas) != 2 || qc.Replicas[0].ID != "q1" || qc.BatchInterval != 500*time.Microsecond {
		t.Errorf("sequencing config %+v", qc)
	}
	oc, err := c.OrderingConfig("o1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(oc.Sequencing) != 2 {
		t.Errorf("ordering replica knows sequencing %v", oc.Sequencing)
	}
	data, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(data); err != nil {
		t.Fatalf("a lazy cluster file does not survive a round trip: %v\n%s", err, data)
	}
}

func TestLazyValidationErrors(t *testing.T) {
	base := strings.Replace(lazyCluster, "mode: lazy\n", "", 1)
	for _, c := range []struct{ name, yaml, want string }{
		{"lazy without sequencing", strings.Split(lazyCluster, "sequencing:")[0], "lazy mode needs at least one"},
		{"sequencing in eager mode", base, "only mode lazy has sequencing replicas"},
		{"sequencing id clash", strings.Replace(lazyCluster, "id: q2", "id: a1", 1), `id "a1" is already used`},
		{"sequencing addr clash", strings.Replace(lazyCluster, "127.0.0.1:7302", "127.0.0.1:7101", 1), "already used by o1"},
		{"zero ring", lazyCluster + "lazy_ring_entries: 1\n", "lazy_ring_entries must be in"},
		{"long batch interval", lazyCluster + "lazy_batch_interval: 2s\n", "lazy_batch_interval must be in"},
		{"lazy knobs in eager mode", strings.Split(base, "sequencing:")[0] + "lazy_ring_entries: 100\n", "apply only to mode lazy"},
	} {
		_, err := Parse([]byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", c.name, err, c.want)
		}
	}
}
