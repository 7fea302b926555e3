package config

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzParse feeds arbitrary bytes to the cluster-file parser. It must not
// panic; errors are errors. A file it accepts must be one every server can
// start from (each ordering and storage config it yields passes that
// server's own Validate), and must survive Marshal and Parse unchanged.
func FuzzParse(f *testing.F) {
	f.Add([]byte(minimal))
	f.Add([]byte(minimal + "mode: spec\nwindow_cuts: 3\n"))
	f.Add([]byte(minimal + "fsync: always\nfailure_timeout: 1ms\n"))
	f.Add([]byte(minimal + "ordering_interval: 1ns\nrecord_bytes_max: 1\nsegment_bytes: 4096\n"))
	f.Add([]byte("cluster_id: x\nordering: []\nstorage: []\nbogus: 1\n"))
	f.Add([]byte("a: &a [*a]\n"))
	if example, err := os.ReadFile(filepath.Join("..", "..", "examples", "cluster.yaml")); err == nil {
		f.Add(example)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			if c != nil {
				t.Fatalf("Parse returned a cluster along with error %v", err)
			}
			return
		}
		for _, o := range c.Ordering {
			oc, err := c.OrderingConfig(o.ID, nil)
			if err != nil {
				t.Fatalf("accepted file, but ordering config of %q: %v", o.ID, err)
			}
			if err := oc.Validate(); err != nil {
				t.Fatalf("accepted file, but ordering replica %q would refuse it: %v\n%s", o.ID, err, data)
			}
		}
		for _, s := range c.Storage {
			sc, err := c.StorageConfig(s.ID, nil)
			if err != nil {
				t.Fatalf("accepted file, but storage config of %q: %v", s.ID, err)
			}
			if err := sc.Validate(); err != nil {
				t.Fatalf("accepted file, but storage server %q would refuse it: %v\n%s", s.ID, err, data)
			}
		}
		out, err := c.Marshal()
		if err != nil {
			t.Fatalf("Marshal of an accepted file: %v", err)
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse of the marshalled file: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(c, again) {
			t.Fatalf("Marshal and Parse changed the cluster:\n%+v\n%+v", c, again)
		}
	})
}
