package grpcapi

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/basin-nas/basin/internal/netapppb"
)

// rawCodec sends a request's bytes as they are, and reads an answer's so.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}
func (rawCodec) Name() string { return "proto" }

// A request that is not protobuf, or not a valid message of its method (a
// string field that is not UTF-8), answers INVALID_ARGUMENT naming the
// request once the caller is admitted, as REST answers a body that is not
// JSON, where grpc-go alone answered INTERNAL to anyone, before
// authentication. A method not served still answers UNIMPLEMENTED, and the
// health service, INVALID_ARGUMENT.
func TestUndecodableRequests(t *testing.T) {
	e := newEnv(t)
	garbage := []byte{0xff, 0xff, 0xff, 0xff}
	notUTF8 := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{'p', 0xff, 0xfe})
	call := func(ctx context.Context, method string, in []byte) *status.Status {
		t.Helper()
		var out []byte
		return status.Convert(e.conn.Invoke(ctx, method, &in, &out, grpc.ForceCodecV2(rawCodec{})))
	}
	for _, tc := range []struct {
		method string
		in     []byte
	}{
		{netapppb.NetApp_GetVolume_FullMethodName, garbage},
		{netapppb.NetApp_GetVolume_FullMethodName, notUTF8},
		{netapppb.NetApp_CreateVolume_FullMethodName, garbage},
		{netapppb.NetApp_CreateVolume_FullMethodName, notUTF8},
	} {
		st := call(as(e.owner), tc.method, tc.in)
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "is not a valid protobuf message") {
			t.Errorf("%s %x: %v %q, want INVALID_ARGUMENT", tc.method, tc.in, st.Code(), st.Message())
		}
		d := restDetails(t, st)
		if len(d) != 1 || !strings.Contains(jsonOf(d), `"field":"request"`) {
			t.Errorf("%s %x: details %s, want a violation of field request", tc.method, tc.in, jsonOf(d))
		}
		if st := call(context.Background(), tc.method, tc.in); st.Code() != codes.Unauthenticated {
			t.Errorf("%s %x without a token: %v, want UNAUTHENTICATED", tc.method, tc.in, st.Code())
		}
	}
	// REST's answer to a body that is not a JSON object: the same code.
	if code, body := e.do(e.owner, "POST", "/v1/"+loc+"/volumes?volumeId=v1", "\xff"); code != 400 || !strings.Contains(string(body), "INVALID_ARGUMENT") {
		t.Errorf("REST, a body that is not JSON: %d %s", code, body)
	}
	if st := call(as(e.owner), netapppb.NetApp_CreateBackupVault_FullMethodName, garbage); st.Code() != codes.Unimplemented {
		t.Errorf("a method not served: %v, want UNIMPLEMENTED", st.Code())
	}
	if st := call(context.Background(), "/"+healthgrpc.Health_ServiceDesc.ServiceName+"/Check", garbage); st.Code() != codes.InvalidArgument {
		t.Errorf("health Check: %v, want INVALID_ARGUMENT", st.Code())
	}
	// Valid requests pass through the codec as before.
	if _, err := e.grpc.GetVolume(as(e.owner), &netapppb.GetVolumeRequest{Name: loc + "/volumes/none"}); status.Code(err) != codes.NotFound {
		t.Errorf("a valid GetVolume: %v, want NOT_FOUND", err)
	}
}
