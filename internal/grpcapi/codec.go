package grpcapi

import (
	"bytes"

	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// requestCodec is grpc-go's protobuf codec, except for a request that does
// not decode: grpc-go answers those INTERNAL ("failed to unmarshal") before
// any interceptor runs, so a client's malformed message would read as the
// server's fault, unauthenticated and unaudited. Here the message is left
// empty and marked (undecodableMark, carrying the decoder's words) in its
// unknown fields, and intercept answers it INVALID_ARGUMENT, once the caller
// is admitted, as REST answers a body that is not JSON.
type requestCodec struct{ encoding.CodecV2 }

func newRequestCodec() requestCodec {
	return requestCodec{encoding.GetCodecV2(protocodec.Name)}
}

// undecodableField is the field number the mark takes: the largest protobuf
// allows, which no message of the API uses.
const undecodableField = protowire.MaxValidNumber

var undecodablePrefix = []byte("basin: undecodable request: ")

func (c requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	m, ok := v.(proto.Message)
	if err == nil || !ok {
		return err
	}
	proto.Reset(m)
	mark := protowire.AppendTag(nil, undecodableField, protowire.BytesType)
	mark = protowire.AppendBytes(mark, append(append([]byte(nil), undecodablePrefix...), err.Error()...))
	m.ProtoReflect().SetUnknown(mark)
	return nil
}

// undecodable returns the decoder's words when req is a request
// requestCodec could not decode.
func undecodable(req any) (string, bool) {
	m, ok := req.(proto.Message)
	if !ok {
		return "", false
	}
	raw := m.ProtoReflect().GetUnknown()
	num, typ, n := protowire.ConsumeTag(raw)
	if n < 0 || num != undecodableField || typ != protowire.BytesType {
		return "", false
	}
	b, m2 := protowire.ConsumeBytes(raw[n:])
	if m2 < 0 || n+m2 != len(raw) || !bytes.HasPrefix(b, undecodablePrefix) {
		return "", false
	}
	return string(b[len(undecodablePrefix):]), true
}
