package leasehold

import (
	"fmt"

	"google.golang.org/protobuf/proto"
)

// codec is the gRPC codec of every call this client makes: it marshals with
// google.golang.org/protobuf, the API the stubs in leaseholdv1 are
// generated for (protoc-gen-go 1.20 and later).
//
// gRPC's own "proto" codec marshals with github.com/golang/protobuf. From
// version 1.4 of that module on, it hands such messages to
// google.golang.org/protobuf and all is well; but Debian's packages pair
// grpc-go 1.33 with github.com/golang/protobuf 1.3.5, which predates that
// API and panics on the first call with a message generated for it. This
// codec is set on the client's own connections only (grpc.ForceCodec in
// their default call options), under the name "proto" so that the
// content type on the wire stays application/grpc+proto: nothing changes
// for the rest of a program, and nothing changes with the module
// ecosystem's versions, where it does what gRPC's codec would do.
type codec struct{}

func (codec) Marshal(v interface{}) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("leasehold: cannot marshal %T: not a protobuf message", v)
	}
	return proto.Marshal(m)
}

func (codec) Unmarshal(data []byte, v interface{}) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("leasehold: cannot unmarshal into %T: not a protobuf message", v)
	}
	return proto.Unmarshal(data, m)
}

func (codec) Name() string { return "proto" }
