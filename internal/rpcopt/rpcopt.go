// Package rpcopt holds the gRPC options every augur server and client uses.
package rpcopt

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

// MsgBytesMax bounds one gRPC message either way: a Raft snapshot, or a batch
// of records up to the largest allowed record size.
const MsgBytesMax = 256 << 20

// Flow-control windows of every augur connection, both ways. Setting them
// turns off gRPC's dynamic windows: with those, the receiver of a stream
// sends a BDP ping for nearly every message on a quiet loopback connection
// (one ping in flight at a time, and the round trip is shorter than the gap
// between messages), and the sender answers it, so every append, replication
// batch, report and cut cost two extra writes and reads. Fixed windows need
// no pings, and large ones need a WINDOW_UPDATE only every quarter window
// (64 KiB windows meant one every four 4 KiB records). A stream window of
// 4 MiB covers a full subscription batch (1 MiB) several times over; the
// connection window lets a few busy streams share a connection.
const (
	StreamWindowBytes = 4 << 20
	ConnWindowBytes   = 16 << 20
)

// ServerOptions are the options of every augur gRPC server.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MsgBytesMax),
		grpc.MaxSendMsgSize(MsgBytesMax),
		experimental.BufferPool(pool),
		grpc.InitialWindowSize(StreamWindowBytes),
		grpc.InitialConnWindowSize(ConnWindowBytes),
		grpc.ForceServerCodecV2(codec{}),
	}
}

// DialOptions are the options of every augur gRPC client connection.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MsgBytesMax), grpc.MaxCallSendMsgSize(MsgBytesMax),
			grpc.ForceCodecV2(codec{})),
		experimental.WithBufferPool(pool),
		grpc.WithInitialWindowSize(StreamWindowBytes),
		grpc.WithInitialConnWindowSize(ConnWindowBytes),
	}
}

// pool is gRPC's buffer pool without zeroing: gRPC overwrites every byte of
// the length it asks for (marshalling, copying a message, reading a frame),
// and clearing whole buffers of batched 4 KiB records cost a fifth of the
// CPU of a loaded cluster.
var pool = newDirtyPool()

// classesMax covers buffers up to 2^classesMax bytes; larger ones are
// allocated and dropped.
const classesMax = 27

type dirtyPool struct {
	classes [classesMax + 1]sync.Pool
}

func newDirtyPool() *dirtyPool { return &dirtyPool{} }

// class is the smallest c with 1<<c >= n.
func class(n int) int {
	if n <= 1 {
		return 0
	}
	return bits.Len(uint(n - 1))
}

func (p *dirtyPool) Get(n int) *[]byte {
	c := class(n)
	if c > classesMax {
		b := make([]byte, n)
		return &b
	}
	if b, ok := p.classes[c].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<c)
	return &b
}

func (p *dirtyPool) Put(b *[]byte) {
	c := class(cap(*b))
	// Only buffers whose capacity is exactly a class size came from Get.
	if c > classesMax || cap(*b) != 1<<c {
		return
	}
	p.classes[c].Put(b)
}

var _ mem.BufferPool = (*dirtyPool)(nil)
