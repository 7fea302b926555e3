package segment

import (
	"testing"
)

// BenchmarkAppend appends 4 KiB records in batches of 64, the shape of a
// storage server's replication batches.
func BenchmarkAppend(b *testing.B) {
	const (
		recordBytes = 4 << 10
		batchLen    = 64
	)
	for _, policy := range []SyncPolicy{SyncNever, SyncAlways} {
		b.Run(policy.String(), func(b *testing.B) {
			s := mustOpen(b, Options{Dir: b.TempDir(), Sync: policy})
			defer s.Close()
			batch := make([]Entry, batchLen)
			for i := range batch {
				batch[i] = Entry{ClientID: 7, Seq: uint64(i), Key: "bench", Payload: make([]byte, recordBytes)}
			}
			b.SetBytes(batchLen * recordBytes)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Append(batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
