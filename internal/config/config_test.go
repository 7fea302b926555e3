package config

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/augur-log/augur/internal/mode"
	"github.com/augur-log/augur/internal/segment"
	"github.com/augur-log/augur/internal/spec"
)

const minimal = `
cluster_id: test
insecure: true
ordering:
  - {id: o1, addr: 127.0.0.1:7101}
storage:
  - {id: a1, group: a, addr: 127.0.0.1:7201}
  - {id: a2, group: a, addr: 127.0.0.1:7202}
`

func TestDefaults(t *testing.T) {
	c, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.ClusterID = "test"
	want.Insecure = true
	want.Ordering = []OrderingNode{{ID: "o1", Addr: "127.0.0.1:7101"}}
	want.Storage = []StorageNode{{ID: "a1", Group: "a", Addr: "127.0.0.1:7201"}, {ID: "a2", Group: "a", Addr: "127.0.0.1:7202"}}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got %+v\nwant %+v", c, want)
	}
	if c.OrderingInterval.D() != time.Millisecond || c.FailureTimeout.D() != time.Second ||
		c.Fsync != "group" || c.FsyncInterval.D() != 10*time.Millisecond || !c.RaftFsync ||
		c.RaftTick.D() != 20*time.Millisecond || c.RecordBytesMax != 1<<20 ||
		c.SegmentBytes != 64<<20 || c.DataDir != "./augur-data" || c.MetricsAddr != "" {
		t.Fatalf("defaults differ from the documented ones: %+v", c)
	}
	if got := c.HeartbeatInterval(); got != 200*time.Millisecond {
		t.Fatalf("heartbeat interval = %v, want failure_timeout/5 = 200ms", got)
	}
}

func TestValidationErrors(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"no cluster id", `
ordering: [{id: o1, addr: "127.0.0.1:1"}]
storage: [{id: a1, group: a, addr: "127.0.0.1:2"}]`, "cluster_id is empty"},
		{"no ordering", `
cluster_id: x
storage: [{id: a1, group: a, addr: "127.0.0.1:2"}]`, "at least one is required"},
		{"no storage", `
cluster_id: x
ordering: [{id: o1, addr: "127.0.0.1:1"}]`, "storage lists no servers"},
		{"duplicate id", `
cluster_id: x
ordering: [{id: o1, addr: "127.0.0.1:1"}]
storage: [{id: o1, group: a, addr: "127.0.0.1:2"}]`, `id "o1" is already used by ordering[0]`},
		{"duplicate addr", `
cluster_id: x
ordering: [{id: o1, addr: "127.0.0.1:1"}]
storage: [{id: a1, group: a, addr: "127.0.0.1:1"}]`, "addr 127.0.0.1:1 is already used by o1"},
		{"bad addr", `
cluster_id: x
ordering: [{id: o1, addr: "localhost"}]
storage: [{id: a1, group: a, addr: "127.0.0.1:2"}]`, "is not host:port"},
		{"port zero", `
cluster_id: x
ordering: [{id: o1, addr: "127.0.0.1:0"}]
storage: [{id: a1, group: a, addr: "127.0.0.1:2"}]`, "port 0 cannot be reached"},
		{"empty group", `
cluster_id: x
ordering: [{id: o1, addr: "127.0.0.1:1"}]
storage: [{id: a1, addr: "127.0.0.1:2"}]`, "group is empty"},
		{"id with slash", `
cluster_id: x
ordering: [{id: ../o1, addr: "127.0.0.1:1"}]
storage: [{id: a1, group: a, addr: "127.0.0.1:2"}]`, "names a data directory"},
		{"zero ordering interval", minimal + "ordering_interval: 0s\n", "ordering_interval must be positive"},
		{"negative fsync interval", minimal + "fsync_interval: -1ms\n", "fsync_interval must be positive"},
		{"zero raft tick", minimal + "raft_tick: 0s\n", "raft_tick must be positive"},
		{"tiny failure timeout", minimal + "failure_timeout: 1ms\n", "failure_timeout must be at least 5ms"},
		{"failure timeout under interval", minimal + "ordering_interval: 100ms\nfailure_timeout: 50ms\n", "must be longer than ordering_interval"},
		{"bad fsync", minimal + "fsync: sometimes\n", `fsync must be group, interval, never or always, got "sometimes"`},
		{"zero record bytes", minimal + "record_bytes_max: 0\n", "record_bytes_max must be in (0, 67108864], got 0"},
		{"huge record bytes", minimal + "record_bytes_max: 67108865\n", "record_bytes_max must be in (0, 67108864]"},
		{"small segments", minimal + "segment_bytes: 100\n", "segment_bytes must be in [4096, 1073741824], got 100"},
		{"empty data dir", minimal + "data_dir: \"\"\n", "data_dir is empty"},
		{"bad metrics addr", minimal + "metrics_addr: nope\n", "metrics_addr: "},
		{"duration without unit", minimal + "ordering_interval: 5\n", `"5" is not a duration`},
		{"duration as map", minimal + "ordering_interval: {ms: 5}\n", "want a duration"},
		{"two documents", minimal + "---\ncluster_id: y\n", "more than one YAML document"},
		{"empty file", "", "empty cluster file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if err == nil {
				t.Fatalf("no error, want one containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

// TestGroupSize: a group lists 2 or 3 servers (its replication factor);
// one error names every group of another size, with the other problems of
// the file.
func TestGroupSize(t *testing.T) {
	for _, n := range []int{GroupServersMin, GroupServersMax} {
		file := "cluster_id: x\ninsecure: true\nordering: [{id: o1, addr: \"127.0.0.1:1\"}]\nstorage:\n"
		for i := range n {
			file += fmt.Sprintf("  - {id: a%d, group: a, addr: \"127.0.0.1:%d\"}\n  - {id: b%d, group: b, addr: \"127.0.0.1:%d\"}\n", i, 10+i, i, 20+i)
		}
		c, err := Parse([]byte(file))
		if err != nil {
			t.Fatalf("groups of %d: %v", n, err)
		}
		if got := len(c.Group("b")); got != n {
			t.Fatalf("group b has %d servers, want %d", got, n)
		}
	}
	_, err := Parse([]byte(`
cluster_id: x
insecure: true
ordering: [{id: o1, addr: "127.0.0.1:1"}]
record_bytes_max: 0
storage:
  - {id: a1, group: a, addr: "127.0.0.1:2"}
  - {id: b1, group: b, addr: "127.0.0.1:3"}
  - {id: b2, group: b, addr: "127.0.0.1:4"}
  - {id: c1, group: c, addr: "127.0.0.1:5"}
  - {id: c2, group: c, addr: "127.0.0.1:6"}
  - {id: c3, group: c, addr: "127.0.0.1:7"}
  - {id: c4, group: c, addr: "127.0.0.1:8"}
`))
	if err == nil {
		t.Fatal("groups of 1 and 4 servers: no error")
	}
	for _, want := range []string{
		`storage group "a" lists 1 server (a1); a group needs 2 or 3`,
		`storage group "c" lists 4 servers (c1, c2, c3, c4); a group needs 2 or 3`,
		"record_bytes_max must be in",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), `group "b"`) {
		t.Errorf("error %q blames group b, which has 2 servers", err)
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	c := Default()
	c.RecordBytesMax = -1
	c.Fsync = "bogus"
	err := c.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"cluster_id is empty", "record_bytes_max", "fsync must be", "ordering lists no replicas", "storage lists no servers"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestUnknownFieldIsAnError(t *testing.T) {
	for _, extra := range []string{"ordering_intervall: 1ms\n", "storage_x: 1\n"} {
		_, err := Parse([]byte(minimal + extra))
		if err == nil || !strings.Contains(err.Error(), "not found") {
			t.Errorf("%q: got %v, want an unknown field error", extra, err)
		}
	}
	_, err := Parse([]byte(`
cluster_id: x
ordering: [{id: o1, addr: "127.0.0.1:1", port: 3}]
storage: [{id: a1, group: a, addr: "127.0.0.1:2"}]`))
	if err == nil || !strings.Contains(err.Error(), "field port not found") {
		t.Errorf("unknown node field: got %v", err)
	}
}

// TestUnknownFieldDoesNotHideOtherProblems gives Parse a file with an
// unknown field, a bad duration and an out-of-range value: all three must
// be reported by one call.
func TestUnknownFieldDoesNotHideOtherProblems(t *testing.T) {
	_, err := Parse([]byte(minimal + "ordering_intervall: 1ms\nfailure_timeout: soon\nrecord_bytes_max: -1\n"))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"field ordering_intervall not found", `"soon" is not a duration`, "record_bytes_max must be in"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestExampleRoundTrip(t *testing.T) {
	path := filepath.Join("..", "..", "examples", "cluster.yaml")
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.OrderingAddrs(), []string{"127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ordering addrs %v, want %v", got, want)
	}
	if got, want := c.Groups(), []string{"a", "b"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("groups %v, want %v", got, want)
	}
	out := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := c.Save(out); err != nil {
		t.Fatal(err)
	}
	again, err := Load(out)
	if err != nil {
		t.Fatalf("reloading the saved file: %v", err)
	}
	if !reflect.DeepEqual(c, again) {
		t.Fatalf("round trip changed the cluster:\n%+v\n%+v", c, again)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "ordering_interval: 1ms") {
		t.Fatalf("durations are not written as duration strings:\n%s", data)
	}
}

func TestServerConfigs(t *testing.T) {
	c, err := Load(filepath.Join("..", "..", "examples", "cluster.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"o2": RoleOrdering, "b1": RoleStorage} {
		if got, err := c.Role(id); err != nil || got != want {
			t.Errorf("Role(%s) = %q, %v; want %q", id, got, err, want)
		}
	}
	if _, err := c.Role("zz"); err == nil {
		t.Error("Role of an unknown id: no error")
	}

	oc, err := c.OrderingConfig("o2", nil)
	if err != nil {
		t.Fatal(err)
	}
	if oc.ID != "o2" || oc.ClusterID != "local" || len(oc.Members) != 3 || oc.Members[1].Addr != "127.0.0.1:7102" ||
		oc.Dir != filepath.Join("augur-data", "o2") || oc.OrderingInterval != time.Millisecond ||
		oc.FailureTimeout != time.Second || oc.RaftTick != 20*time.Millisecond {
		t.Errorf("ordering config %+v", oc)
	}
	if err := oc.Validate(); err != nil {
		t.Errorf("ordering config does not validate: %v", err)
	}
	if _, err := c.OrderingConfig("a1", nil); err == nil {
		t.Error("OrderingConfig of a storage server: no error")
	}

	sc, err := c.StorageConfig("b2", nil)
	if err != nil {
		t.Fatal(err)
	}
	if sc.ID != "b2" || sc.GroupName != "b" || len(sc.Group) != 2 || sc.Group[0].ID != "b1" ||
		sc.Group[1].Addr != "127.0.0.1:7212" || len(sc.Ordering) != 3 || sc.Sync != segment.SyncGroup ||
		sc.SyncInterval != 10*time.Millisecond || sc.HeartbeatInterval != 200*time.Millisecond ||
		sc.RecordBytesMax != 1<<20 || sc.SegmentBytes != 64<<20 || sc.Dir != filepath.Join("augur-data", "b2") {
		t.Errorf("storage config %+v", sc)
	}
	if err := sc.Validate(); err != nil {
		t.Errorf("storage config does not validate: %v", err)
	}
	if _, err := c.StorageConfig("o1", nil); err == nil {
		t.Error("StorageConfig of an ordering replica: no error")
	}
}

func TestStaggerAbove(t *testing.T) {
	c, err := Parse([]byte(minimal + "mode: spec\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.StaggerAbove != DefaultStaggerAbove || DefaultStaggerAbove != spec.DefaultConfig(time.Millisecond).StaggerAbove {
		t.Fatalf("stagger_above defaults to %d; the cluster default is %d, the policy's %d",
			c.StaggerAbove, DefaultStaggerAbove, spec.DefaultConfig(time.Millisecond).StaggerAbove)
	}
	// 0 turns staggering off, and survives a round trip.
	c, err = Parse([]byte(minimal + "mode: spec\nstagger_above: 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(mustMarshalCluster(t, c))
	if err != nil {
		t.Fatal(err)
	}
	oc, err := back.OrderingConfig("o1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if sm, ok := oc.Mode.(mode.Spec); !ok || sm.Config.StaggerAbove != 0 {
		t.Fatalf("stagger_above 0 gave the mode %+v", oc.Mode)
	}
	if _, err := Parse([]byte(minimal + "stagger_above: -1\n")); err == nil || !strings.Contains(err.Error(), "stagger_above must not be negative") {
		t.Fatalf("negative stagger_above: %v", err)
	}
}

func TestValidateWithoutStorage(t *testing.T) {
	c := Default()
	c.ClusterID = "x"
	c.Insecure = true
	c.Ordering = []OrderingNode{{ID: "o1", Addr: "127.0.0.1:1"}}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "storage lists no servers") {
		t.Fatalf("Validate: %v", err)
	}
	if err := c.ValidateWithoutStorage(); err != nil {
		t.Fatalf("ValidateWithoutStorage: %v", err)
	}
	c.Ordering = nil
	if err := c.ValidateWithoutStorage(); err == nil {
		t.Fatal("ValidateWithoutStorage accepted a cluster without ordering replicas")
	}
}

func mustMarshalCluster(t *testing.T, c *Cluster) []byte {
	t.Helper()
	data, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return data
}
