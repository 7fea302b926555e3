package rpcopt

import "testing"

func TestDirtyPoolSizes(t *testing.T) {
	p := newDirtyPool()
	for _, n := range []int{0, 1, 2, 3, 4095, 4096, 4097, 1 << 20, (1 << 20) + 1} {
		b := p.Get(n)
		if len(*b) != n || cap(*b) < n {
			t.Fatalf("Get(%d): len %d cap %d", n, len(*b), cap(*b))
		}
		p.Put(b)
		again := p.Get(n)
		if len(*again) != n {
			t.Fatalf("Get(%d) after Put: len %d", n, len(*again))
		}
	}
	// A foreign buffer of odd capacity is not pooled, so a later Get never
	// sees a capacity below its class size.
	odd := make([]byte, 100)
	p.Put(&odd)
	if b := p.Get(120); cap(*b) < 120 {
		t.Fatalf("cap %d", cap(*b))
	}
}
