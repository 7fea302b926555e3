package spec

// Confirmer decides when a speculative stream tells its subscriber the end
// of a committed cut: only where the end confirms positions the stream
// itself sent. A subscriber's merger takes any stream's word for the whole
// log, and each stream confirms its own entries, so the ends the other
// streams carry are news enough; every stream sending every end cost each
// subscriber a message per shard per cut (at 8 shards and 500 records/s,
// 4,000 a second for 500 records). The zero value has sent nothing.
type Confirmer struct {
	// sent is one past the last position the stream sent; confirmed the
	// last end it sent.
	sent, confirmed uint64
}

// Sent notes that the stream sent the item at pos: a record, or skip
// no-ops from pos on.
func (c *Confirmer) Sent(pos, skip uint64) {
	c.sent = max(c.sent, pos+max(skip, 1))
}

// Confirm reports whether the stream sends end, the end of the last
// committed cut, now; if so it counts as sent.
func (c *Confirmer) Confirm(end uint64) bool {
	if end <= c.confirmed || c.sent <= c.confirmed {
		return false
	}
	c.confirmed = end
	return true
}
