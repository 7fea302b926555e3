// Package player is the pure core of augur's exactly-once player (LogPlayer):
// it reads the ordered log as a main stream, routes each entry to the
// targets it concerns, and delivers to each target, in log order and exactly
// once, across target and player failures.
//
// The core holds the paper's four pieces as one state machine:
//
//   - a target queue per target (Algorithms 1 and 2): the states Normal,
//     RecoveryFetching, FetchingCompleted and Suspended, a normal queue for
//     the main stream and a catch-up queue for a recovery stream, a term that
//     grows on every reconnect, batches bounded in count and bytes, and the
//     popped batches that stay held until the target acknowledges them;
//   - the dispatcher (Algorithm 3): route an entry, push one message per
//     target, track the current index, and every Config.EmptyEvery entries
//     push an empty message to the targets that had nothing to apply;
//   - the completion-queue consumer (Algorithm 4): write completions and
//     acknowledgements come in as events;
//   - recovery (Algorithm 5): a returning target gets a new term and, when
//     it is behind, a recovery fetch of exactly the range it missed; a
//     restarting player starts its main stream at the smallest last applied
//     index plus one.
//
// It has no goroutines, sockets, files, clocks or randomness: events go in
// through Core.Step and actions come out in an Output. Time-based decisions
// (a target that stopped acknowledging, a target whose queue stayed full too
// long) belong to the server, which turns them into TargetDown events.
//
// # Mapping the paper's completion queue onto goroutines
//
// The paper runs one completion-queue thread for all asynchronous gRPC
// streams and lets dispatcher threads call into locked target queues. In Go
// the server that drives this core keeps the core on one goroutine, the
// event loop, which owns the Core and is the only caller of Step, so the
// core needs no locks (the paper's L_d, L_q, L_s and L_p become the loop's
// sequential order). Around it:
//
//   - the main fetcher goroutine reads the confirmed-only subscription and
//     sends EntryFetched{Stream: Main} on its own channel; the loop stops
//     receiving from that channel while Core.MainWait is true (the
//     back-pressure of a full queue: the fetcher blocks on the channel send
//     and the subscription stops being read);
//   - one recovery fetcher goroutine per StartRecoveryFetch reads the given
//     range and sends EntryFetched{Stream: Recovery} and finally
//     RecoveryFetchDone, tagged with the fetch's target and term, on its own
//     channel; the loop stops receiving from it while Core.RecoveryWait is
//     true for its target;
//   - per connected target, one writer goroutine takes the Sends of that
//     target (at most one is outstanding, because the core waits for
//     WriteDone before the next) and writes them to the bidirectional Apply
//     stream, then reports WriteDone; one reader goroutine receives the
//     stream's acknowledgements and reports AckReceived. Both tag their
//     events with the term the connection was opened under, so events of a
//     dead connection that arrive late are ignored by the term rule. These
//     two goroutines are the Go form of the paper's write and read tags on
//     the completion queue: they turn blocking stream calls into completion
//     events, and the event loop is the completion-queue consumer;
//   - a health checker turns a broken stream or a target silent for too long
//     into TargetDown, and a reconnected target whose LastApplied answered
//     into TargetUp.
//
// The loop itself never blocks on I/O: every send to a goroutine above goes
// through a channel with room for what the core allows in flight.
//
// internal/playerd is that server; the target package is the SDK targets
// are written with.
package player
