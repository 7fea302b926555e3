package main

import (
	"strings"
	"testing"
)

func TestSimCommand(t *testing.T) {
	out, err := runAugur(t, "sim", "--mode", "eager,spec,lazy", "--seeds", "4")
	if err != nil {
		t.Fatalf("sim: %v\n%s", err, out)
	}
	for _, want := range []string{
		"eager (faults all): 4 seeds (2 with 3 servers per shard), 0 failing",
		"spec (faults all): 4 seeds (2 with 3 servers per shard), 0 failing",
		"lazy (faults all): 4 seeds (2 with 3 servers per shard), 0 failing",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("sim output lacks %q:\n%s", want, out)
		}
	}
	out, err = runAugur(t, "sim", "--mode", "spec", "--seed", "3", "--trace", "--faults", "none")
	if err != nil || !strings.Contains(out, "leader: plan window") || !strings.HasSuffix(out, "ok\n") {
		t.Errorf("sim --seed 3 --trace: %v\n%s", err, out[max(0, len(out)-500):])
	}
	for _, c := range []struct{ args, want string }{
		{"sim --mode lazier", `unknown mode "lazier"`},
		{"sim --faults fire", `unknown fault "fire"`},
		{"sim --seeds 0", "--seeds must be at least 1"},
		{"sim --trace", "--trace needs --seed"},
		{"sim --mode lazy --replicas 4 --seeds 1", "a storage group has 2 or 3"},
	} {
		if _, err := runAugur(t, strings.Fields(c.args)...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.args, err, c.want)
		}
	}
}
