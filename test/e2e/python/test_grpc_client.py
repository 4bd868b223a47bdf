"""Drives Basin with the official Python client `google-cloud-netapp` on its default
transport, gRPC (basin serve --grpc-listen, TLS with the certificate Basin issues,
trusted through grpc's channel credentials): the pool → volume → snapshot → clone →
update → revert → delete flow, long-running operations polled over
google.longrunning.Operations, locations, and errors as gRPC statuses with REST's
details."""
import os

import grpc
import pytest
from google.api_core import exceptions
from google.cloud import netapp_v1
from google.protobuf import field_mask_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from conftest import PARENT, Basin, _free_port, forge_key

NETWORK = "projects/p1/global/networks/default"


@pytest.fixture(scope="module")
def basin_grpc():
    """A server with --grpc-listen, and the gRPC endpoint clients dial."""
    endpoint = f"127.0.0.1:{_free_port()}"
    b = Basin("--grpc-listen", endpoint)
    b.grpc_endpoint = endpoint
    yield b
    b.stop()


def test_flow_over_grpc(basin_grpc):
    client = basin_grpc.grpc_client(basin_grpc.grpc_endpoint)
    assert [l.location_id for l in client.list_locations(request={"name": "projects/p1"}).locations] == ["us-east4"]

    pool = client.create_storage_pool(parent=PARENT, storage_pool_id="gpool", storage_pool=netapp_v1.StoragePool(
        service_level=netapp_v1.ServiceLevel.PREMIUM, capacity_gib=100, network=NETWORK)).result(timeout=60)
    assert pool.state == netapp_v1.StoragePool.State.READY and pool.capacity_gib == 100

    vol = client.create_volume(parent=PARENT, volume_id="gvol", volume=netapp_v1.Volume(
        share_name="gvol", storage_pool="gpool", capacity_gib=10, protocols=[netapp_v1.Protocols.NFSV3],
        export_policy=netapp_v1.ExportPolicy(rules=[netapp_v1.SimpleExportPolicyRule(
            allowed_clients="10.99.0.0/24", access_type=netapp_v1.AccessType.READ_WRITE, nfsv3=True)]))).result(timeout=60)
    assert vol.state == netapp_v1.Volume.State.READY and vol.name == f"{PARENT}/volumes/gvol"

    snap = client.create_snapshot(parent=vol.name, snapshot_id="s1",
                                  snapshot=netapp_v1.Snapshot(description="before")).result(timeout=60)
    assert snap.state == netapp_v1.Snapshot.State.READY and snap.description == "before"
    snap = client.update_snapshot(snapshot=netapp_v1.Snapshot(name=snap.name, labels={"a": "b"}),
                                  update_mask=field_mask_pb2.FieldMask(paths=["labels"])).result(timeout=60)
    assert snap.labels["a"] == "b" and snap.description == "before"

    # Trident's update: capacity, labels, permissions, the snapshot directory.
    updated = client.update_volume(
        volume=netapp_v1.Volume(name=vol.name, capacity_gib=12, labels={"pvc": "data"}, unix_permissions="0755",
                                snapshot_directory=True, description="not in the mask"),
        update_mask=field_mask_pb2.FieldMask(paths=["capacity_gib", "labels", "unix_permissions", "snapshot_directory"]),
    ).result(timeout=60)
    assert updated.capacity_gib == 12 and updated.labels["pvc"] == "data" and updated.unix_permissions == "0755"
    assert updated.snapshot_directory and not updated.description

    clone = client.create_volume(parent=PARENT, volume_id="gclone", volume=netapp_v1.Volume(
        share_name="gclone", storage_pool="gpool", capacity_gib=10, protocols=[netapp_v1.Protocols.NFSV3],
        restore_parameters=netapp_v1.RestoreParameters(source_snapshot=snap.name))).result(timeout=60)
    assert clone.clone_details.source_snapshot == snap.name and clone.clone_details.source_volume == vol.name

    reverted = client.revert_volume(request=netapp_v1.RevertVolumeRequest(name=vol.name, snapshot_id="s1")).result(timeout=60)
    assert reverted.state == netapp_v1.Volume.State.READY

    # Without force a volume with snapshots stays; the error is REST's.
    with pytest.raises(exceptions.FailedPrecondition):
        client.delete_volume(name=vol.name).result(timeout=60)
    ops = client.list_operations(request={"name": PARENT})
    assert any(op.name.startswith(f"{PARENT}/operations/") and op.done for op in ops.operations)

    client.delete_volume(name=clone.name).result(timeout=60)
    client.delete_volume(request=netapp_v1.DeleteVolumeRequest(name=vol.name, force=True)).result(timeout=60)
    with pytest.raises(exceptions.NotFound):
        client.get_snapshot(name=snap.name)
    client.delete_storage_pool(name=pool.name).result(timeout=60)
    assert [p.name for p in client.list_storage_pools(parent=PARENT)] == []


def test_trident_default_export_rule(basin_grpc):
    """A volume as Trident's GCNV driver makes it by default: every client
    (0.0.0.0/0) read-write over NFSv3 and NFSv4.1, which Ganesha takes only as
    "*"."""
    client = basin_grpc.grpc_client(basin_grpc.grpc_endpoint)
    pool = client.create_storage_pool(parent=PARENT, storage_pool_id="tpool", storage_pool=netapp_v1.StoragePool(
        service_level=netapp_v1.ServiceLevel.PREMIUM, capacity_gib=100, network=NETWORK)).result(timeout=60)
    vol = client.create_volume(parent=PARENT, volume_id="pvc-any", volume=netapp_v1.Volume(
        name="pvc-any", share_name="pvc-any", storage_pool="tpool", capacity_gib=100, unix_permissions="0777",
        protocols=[netapp_v1.Protocols.NFSV3, netapp_v1.Protocols.NFSV4], security_style=netapp_v1.SecurityStyle.UNIX,
        export_policy=netapp_v1.ExportPolicy(rules=[netapp_v1.SimpleExportPolicyRule(
            allowed_clients="0.0.0.0/0", access_type=netapp_v1.AccessType.READ_WRITE, nfsv3=True, nfsv4=True)]))).result(timeout=60)
    assert vol.state == netapp_v1.Volume.State.READY and vol.mount_options
    client.delete_volume(request=netapp_v1.DeleteVolumeRequest(name=vol.name, force=True)).result(timeout=60)
    client.delete_storage_pool(name=pool.name).result(timeout=60)


def test_errors_over_grpc(basin_grpc, forged_key_grpc):
    client = basin_grpc.grpc_client(basin_grpc.grpc_endpoint)
    with pytest.raises(exceptions.NotFound) as e:
        client.get_volume(name=f"{PARENT}/volumes/nope")
    assert "nope" in e.value.message
    with pytest.raises(exceptions.InvalidArgument) as e:
        client.create_storage_pool(parent=PARENT, storage_pool_id="Bad_ID", storage_pool=netapp_v1.StoragePool(
            service_level=netapp_v1.ServiceLevel.PREMIUM, capacity_gib=100, network=NETWORK))
    assert [fv.field for d in e.value.details if hasattr(d, "field_violations") for fv in d.field_violations] == ["storagePoolId"]
    with pytest.raises(exceptions.MethodNotImplemented) as e:
        client.list_backup_vaults(parent=PARENT)
    assert e.value.reason == "METHOD_NOT_IMPLEMENTED" and e.value.domain == "netapp.googleapis.com"
    with pytest.raises(exceptions.Unauthenticated):
        basin_grpc.grpc_client(basin_grpc.grpc_endpoint, key_file=forged_key_grpc).get_volume(name=f"{PARENT}/volumes/nope")


@pytest.fixture
def forged_key_grpc(basin_grpc, tmp_path):
    """basin_grpc's owner key file with an unknown key id."""
    return forge_key(basin_grpc, tmp_path)


def test_health_over_grpc(basin_grpc):
    """gRPC's own health client (grpcio-health-checking), as load balancers and
    probes use it: no credentials beyond TLS; SERVING for the server and each
    API service, NOT_FOUND for a service not served."""
    with open(os.path.join(basin_grpc.data_dir, "grpc-ca.pem"), "rb") as f:
        tls = grpc.ssl_channel_credentials(root_certificates=f.read())
    with grpc.secure_channel(basin_grpc.grpc_endpoint, tls) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        for service in ("", "google.cloud.netapp.v1.NetApp", "google.longrunning.Operations"):
            r = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert r.status == health_pb2.HealthCheckResponse.SERVING, service
        with pytest.raises(grpc.RpcError) as e:
            stub.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=10)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        # Watch is not served (docs/grpc.md says why): UNIMPLEMENTED, which
        # tells clients not to retry it.
        with pytest.raises(grpc.RpcError) as e:
            next(stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=10))
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
