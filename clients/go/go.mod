module github.com/leasehold/leasehold/clients/go

go 1.19

// The oldest versions the client is tested with: those of Debian's
// packages (golang-google-grpc-dev 1.33.3, golang-google-protobuf-dev
// 1.28.1), and the genproto grpc 1.33.3 itself requires (the tests use its
// google.rpc.Status). Newer ones work: Go picks the highest any module of a
// build asks for.
require (
	github.com/golang/protobuf v1.5.0
	// The tests' PostgreSQL driver (the fence guards take any database/sql
	// driver): Debian's golang-github-lib-pq-dev 1.10.7.
	github.com/lib/pq v1.10.7
	google.golang.org/genproto v0.0.0-20200526211855-cb27e3aa2013
	google.golang.org/grpc v1.33.3
	google.golang.org/protobuf v1.28.1
)

require (
	golang.org/x/net v0.0.0-20190311183353-d8887717615a // indirect
	golang.org/x/sys v0.0.0-20190215142949-d0b11bdaac8a // indirect
	golang.org/x/text v0.3.0 // indirect
)
