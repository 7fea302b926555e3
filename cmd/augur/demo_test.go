package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestDemo runs the README's first command, briefly, in speculative mode
// on one shard and in eager mode: every append is acknowledged, every
// subscriber gets the same sequence, and a speculative run says how much
// of it the cluster speculated (one shard never needs another's fills,
// so all of it).
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded clusters")
	}
	for _, c := range []struct {
		mode   string
		args   []string
		want   []string
		absent string
	}{
		{"spec", []string{"--shards", "1", "--replicas", "3"}, []string{
			"1 shard × 3 replicas",
			"appends           500 acknowledged",
			"misspeculations   0 fail_spec events",
			"speculation       100% of the cuts were predetermined by lease windows\n",
			"subscribers       all 2 received the identical sequence: 500 records",
		}, "shards to fill their empty slots"},
		{"eager", nil, []string{
			"2 shards × 2 replicas",
			"appends           500 acknowledged",
			"delivery latency  p50",
			"subscribers       all 2 received the identical sequence: 500 records, positions 0..499 (dense)",
		}, "speculation"},
	} {
		t.Run(c.mode, func(t *testing.T) {
			args := append([]string{"demo", "--mode", c.mode, "--duration", "1s", "--rate", "500"}, c.args...)
			out, err := runAugur(t, args...)
			if err != nil {
				t.Fatalf("demo: %v\n%s", err, out)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(out, c.absent) {
				t.Errorf("output has %q:\n%s", c.absent, out)
			}
		})
	}
}

// TestDemoExplainsAFallback checks that the demo says why a speculative
// run delivered no earlier when its leader mostly cut eagerly, and says
// nothing more when it speculated.
func TestDemoExplainsAFallback(t *testing.T) {
	var buf bytes.Buffer
	printSpeculation(&buf, 4, 1)
	for _, w := range []string{"4% of the cuts were predetermined", "at the 1.0 records per shard per ordering interval offered", "try --shards 1"} {
		if !strings.Contains(buf.String(), w) {
			t.Errorf("fallback explanation lacks %q:\n%s", w, buf.String())
		}
	}
	buf.Reset()
	printSpeculation(&buf, 97, 2)
	if got := strings.Count(buf.String(), "\n"); got != 1 {
		t.Errorf("a speculating run's summary is %d lines, want 1:\n%s", got, buf.String())
	}
}

func TestDemoFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"demo", "--shards", "0"}, "--shards must be in [1, 64], got 0"},
		{[]string{"demo", "--shards", "65"}, "--shards must be in [1, 64], got 65"},
		{[]string{"demo", "--replicas", "1"}, "--replicas must be 2 or 3, got 1"},
		{[]string{"demo", "--mode", "fast"}, "--mode: "},
	} {
		if _, err := runAugur(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want an error containing %q", c.args, err, c.want)
		}
	}
}
