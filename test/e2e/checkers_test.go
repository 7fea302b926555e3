package e2e

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// TestLogModel checks the porcupine model on small histories, so a passing
// end-to-end run means something.
func TestLogModel(t *testing.T) {
	app := func(client int, payload string, call, ret int64, pos uint64) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: appendInput{payload}, Call: call, Output: pos, Return: ret}
	}
	read := func(client int, pos uint64, call, ret int64, payload string) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: readInput{pos}, Call: call, Output: payload, Return: ret}
	}
	cases := []struct {
		name string
		ops  []porcupine.Operation
		ok   bool
	}{
		{"sequential", []porcupine.Operation{app(0, "x", 0, 1, 0), app(0, "y", 2, 3, 1), read(1, 1, 4, 5, "y")}, true},
		{"concurrent appends in either order", []porcupine.Operation{app(0, "x", 0, 10, 1), app(1, "y", 1, 9, 0)}, true},
		{"later append got a lower position", []porcupine.Operation{app(0, "x", 0, 1, 1), app(1, "y", 2, 3, 0)}, false},
		{"position skipped", []porcupine.Operation{app(0, "x", 0, 1, 0), app(0, "y", 2, 3, 2)}, false},
		{"position shared", []porcupine.Operation{app(0, "x", 0, 1, 0), app(1, "y", 0, 1, 0)}, false},
		{"read before the append began", []porcupine.Operation{read(1, 0, 0, 1, "x"), app(0, "x", 2, 3, 0)}, false},
		{"read concurrent with the append", []porcupine.Operation{app(0, "x", 0, 3, 0), read(1, 0, 1, 2, "x")}, true},
	}
	for _, c := range cases {
		if got := porcupine.CheckOperations(logModel, c.ops); got != c.ok {
			t.Errorf("%s: linearizable = %v, want %v", c.name, got, c.ok)
		}
	}
}

func TestMaxGap(t *testing.T) {
	ms := time.Millisecond
	acks := []time.Duration{5 * ms, 10 * ms, 40 * ms, 45 * ms, 100 * ms}
	cases := []struct {
		from, to, gap, at time.Duration
	}{
		{0, 50 * ms, 30 * ms, 10 * ms},
		{0, 200 * ms, 100 * ms, 100 * ms},
		{41 * ms, 44 * ms, 3 * ms, 41 * ms},
		{0, 45 * ms, 30 * ms, 10 * ms},
	}
	for _, c := range cases {
		gap, at := maxGap(acks, c.from, c.to)
		if gap != c.gap || at != c.at {
			t.Errorf("maxGap(%v..%v) = %v at %v, want %v at %v", c.from, c.to, gap, at, c.gap, c.at)
		}
	}
}
