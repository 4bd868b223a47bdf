package netapppb_test

import (
	"testing"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/basin-nas/basin/internal/netapppb"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// The generated code must resolve google.longrunning.Operation to the official
// longrunningpb message (not a local copy), and every method must be there.
func TestServiceUsesOfficialOperation(t *testing.T) {
	sd := netapppb.File_google_cloud_netapp_v1_cloud_netapp_service_proto.Services().ByName("NetApp")
	if sd == nil {
		t.Fatal("no NetApp service")
	}
	if got := sd.Methods().Len(); got != 71 {
		t.Errorf("NetApp has %d methods, want 71", got)
	}
	op := sd.Methods().ByName("CreateVolume").Output()
	if op.FullName() != "google.longrunning.Operation" {
		t.Fatalf("CreateVolume returns %s", op.FullName())
	}
	if op != (&longrunningpb.Operation{}).ProtoReflect().Descriptor() {
		t.Error("CreateVolume's Operation is not longrunningpb's")
	}
	if op.Fields().ByName("done") == nil {
		t.Error("Operation has no field done")
	}
	for _, name := range []protoreflect.FullName{"google.cloud.netapp.v1.Volume", "google.cloud.netapp.v1.OperationMetadata", "google.cloud.netapp.v1.LocationMetadata"} {
		if _, err := protoregistry.GlobalTypes.FindMessageByName(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
