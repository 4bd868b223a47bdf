package e2e

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/basin-nas/basin/internal/client"
)

// TestShareNameTakenOnTheNetwork: a project cannot take the export path of
// another project's volume on the same network (every project's exports there
// are /<shareName> of one Ganesha). The refusal comes at once, names neither
// project nor volume, creates nothing, and the holder's clients read on.
func TestShareNameTakenOnTheNetwork(t *testing.T) {
	s := newServer(t)
	s.start()
	c := s.client()
	p2 := "/v1/projects/p2/locations/us-east4"
	nfsPool(t, c)
	mutate(t, c, "POST", p2+"/storagePools?storagePoolId=pool2", map[string]any{"serviceLevel": "PREMIUM", "capacityGib": "100", "network": "projects/p2/global/networks/default"})
	s.openVolume(c, "team")
	ep := endpoint(t, c, "team")
	nfs := s.host(201).NFS(3, 0, 0)
	data := bytes.Repeat([]byte("p1's data "), 1000)
	if err := nfs.Write(ep, "/team/f", data); err != nil {
		t.Fatal(err)
	}

	for _, name := range []string{"team", "TEAM"} {
		var op client.Object
		err := c.Do(context.Background(), "POST", p2+"/volumes?volumeId=mine", nil, map[string]any{"shareName": name, "storagePool": "pool2",
			"capacityGib": "1", "protocols": []string{"NFSV3"}}, &op)
		if op != nil {
			op, err = c.Wait(context.Background(), op)
		}
		var ae *client.Error
		if !errors.As(err, &ae) || ae.HTTPStatus != 409 {
			t.Fatalf("p2 creating share name %s of p1's: %v (operation %v), want 409 at once", name, err, op)
		}
		for _, leak := range []string{"p1", "team/", "volumes/"} {
			if strings.Contains(ae.Message, leak) {
				t.Errorf("the refusal names %q: %s", leak, ae.Message)
			}
		}
	}
	var vols struct{ Volumes []any }
	if err := c.Do(context.Background(), "GET", p2+"/volumes", nil, nil, &vols); err != nil || len(vols.Volumes) != 0 {
		t.Fatalf("p2's volumes after the refusal: %v %v", vols.Volumes, err)
	}
	got, err := nfs.Read(ep, "/team/f")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("p1's client reads %d bytes, %v; want its %d", len(got), err, len(data))
	}
	// p2 gets a volume under another name, served beside p1's.
	mutate(t, c, "POST", p2+"/volumes?volumeId=mine", map[string]any{"shareName": "team2", "storagePool": "pool2", "capacityGib": "1",
		"protocols": []string{"NFSV3"}, "exportPolicy": map[string]any{"rules": []any{rule(s.subnet.String(), "READ_WRITE", true, false, "true")}}})
	if err := nfs.Write(endpointIn(t, c, "p2", "mine"), "/team2/g", []byte("p2")); err != nil {
		t.Fatal(err)
	}
	if got, err := nfs.Read(ep, "/team/f"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("p1's client after p2's volume: %d bytes, %v", len(got), err)
	}
}
