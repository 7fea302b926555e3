// Package augurpb holds augur's wire types and gRPC services.
package augurpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative augur.proto
