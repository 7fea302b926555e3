package rpcopt

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// codec is gRPC's protobuf codec with marshal and unmarshal buffers from
// pool. gRPC's own codec takes them from its default pool, which zeroes
// every buffer it hands out: with batches of 4 KiB records that clearing
// was a tenth of a loaded cluster's CPU, and the experimental.BufferPool
// options do not reach the codec. It is set per connection and server (see
// DialOptions and ServerOptions), so other gRPC users in the process keep
// the default codec.
type codec struct{}

var _ encoding.CodecV2 = codec{}

// Name is the standard "proto", so peers without this codec interoperate.
func (codec) Name() string { return "proto" }

// message returns v as a protobuf message, as gRPC's codec does.
func message(v any) proto.Message {
	switch m := v.(type) {
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(m)
	case protoadapt.MessageV2:
		return m
	}
	return nil
}

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	m := message(v)
	if m == nil {
		return nil, fmt.Errorf("rpcopt: cannot marshal %T: not a protobuf message", v)
	}
	size := proto.Size(m)
	// Size just computed the cached sizes, and the message is not mutated
	// meanwhile, so marshalling may reuse them.
	opts := proto.MarshalOptions{UseCachedSize: true}
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := pool.Get(size)
	b, err := opts.MarshalAppend((*buf)[:0], m)
	if err != nil {
		pool.Put(buf)
		return nil, err
	}
	*buf = b
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	m := message(v)
	if m == nil {
		return fmt.Errorf("rpcopt: cannot unmarshal into %T: not a protobuf message", v)
	}
	buf := data.MaterializeToBuffer(pool)
	defer buf.Free()
	// Unmarshal copies every bytes field, so the buffer can go back to the
	// pool afterwards.
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}
