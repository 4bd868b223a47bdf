package grpcapi

import (
	"reflect"
	"strings"
	"testing"

	"github.com/basin-nas/basin/internal/apiv1"
	"github.com/basin-nas/basin/internal/netapppb"
)

// The converter carries int64 (REST's strings), enums (names), timestamps,
// maps, repeated and nested messages both ways.
func TestConvert(t *testing.T) {
	clients := "10.0.0.0/8"
	w := apiv1.Volume{Name: "projects/p/locations/l/volumes/v", CreateTime: "2026-11-30T05:39:17.803826391Z",
		ServiceLevel: apiv1.ServiceLevel(netapppb.ServiceLevel_PREMIUM), CapacityGib: 1 << 40,
		Labels: map[string]string{"a": "b"}, ExportPolicy: &apiv1.ExportPolicy{Rules: []apiv1.SimpleExportPolicyRule{{AllowedClients: &clients}}}}
	var m netapppb.Volume
	if err := toProto(w, &m); err != nil {
		t.Fatal(err)
	}
	if m.GetCapacityGib() != 1<<40 || m.GetServiceLevel() != netapppb.ServiceLevel_PREMIUM || m.GetLabels()["a"] != "b" ||
		m.GetCreateTime().AsTime().Nanosecond() != 803826391 || m.GetExportPolicy().GetRules()[0].GetAllowedClients() != "10.0.0.0/8" {
		t.Fatalf("toProto: %v", &m)
	}
	b, err := body(&m)
	if err != nil {
		t.Fatal(err)
	}
	var back apiv1.Volume
	if _, err := apiv1.Decode(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, w) {
		t.Errorf("round trip:\n %+v\nwant\n %+v", back, w)
	}
}

// A REST field the message does not declare is an error, not dropped.
func TestConvertUnknownField(t *testing.T) {
	err := toProto(map[string]any{"name": "x", "notAField": 1}, &netapppb.Volume{})
	if err == nil || !strings.Contains(err.Error(), "notAField") {
		t.Fatalf("err = %v", err)
	}
}
