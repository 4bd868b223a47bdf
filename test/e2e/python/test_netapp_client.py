"""Drives Basin with the official Python client `google-cloud-netapp` (pinned in
requirements.txt), REST transport, service-account key file: every call the issue
names, and the error cases with their exact HTTP statuses and canonical codes."""
import pytest
from google.api_core import exceptions
from google.cloud import netapp_v1
from google.protobuf import field_mask_pb2

from conftest import PARENT

NETWORK = "projects/p1/global/networks/default"


def status_of(exc):
    """The canonical code name of an HTTP error, from the body Basin sent."""
    return exc.response.json()["error"]["status"]


def make_pool(client, pool_id, capacity=100, level=netapp_v1.ServiceLevel.PREMIUM, **kw):
    pool = netapp_v1.StoragePool(service_level=level, capacity_gib=capacity, network=NETWORK, **kw)
    return client.create_storage_pool(parent=PARENT, storage_pool=pool, storage_pool_id=pool_id).result(timeout=60)


def make_volume(client, vol_id, pool_id, capacity=10, **kw):
    vol = netapp_v1.Volume(share_name=vol_id, storage_pool=pool_id, capacity_gib=capacity,
                           protocols=[netapp_v1.Protocols.NFSV3], **kw)
    return client.create_volume(parent=PARENT, volume=vol, volume_id=vol_id).result(timeout=60)


def test_locations_strict_parser(basin):
    client = basin.client()
    resp = client.list_locations(request={"name": "projects/p1"})
    assert [l.location_id for l in resp.locations] == ["us-east4"]
    loc = client.get_location(request={"name": PARENT})
    assert loc.name == PARENT and loc.metadata.type_url.endswith("LocationMetadata")


def test_pool_volume_snapshot_lifecycle(basin):
    client = basin.client()
    pool = make_pool(client, "pool1", 2048, labels={"env": "dev"})
    assert pool.state == netapp_v1.StoragePool.State.READY
    assert pool.capacity_gib == 2048 and pool.labels["env"] == "dev"

    vol = make_volume(client, "vol1", "pool1", 1500, unix_permissions="0755",
                      export_policy=netapp_v1.ExportPolicy(rules=[netapp_v1.SimpleExportPolicyRule(
                          allowed_clients="10.99.0.0/24", has_root_access="false",
                          access_type=netapp_v1.AccessType.READ_WRITE, nfsv3=True, nfsv4=False)]))
    assert vol.state == netapp_v1.Volume.State.READY
    assert vol.service_level == netapp_v1.ServiceLevel.PREMIUM
    assert vol.throughput_mibps == pytest.approx(93.75)  # 1500 GiB × 64 MiB/s per TiB
    assert vol.export_policy.rules[0].allowed_clients == "10.99.0.0/24"

    got = client.get_volume(name=f"{PARENT}/volumes/vol1")
    assert got.capacity_gib == 1500 and got.unix_permissions == "0755"
    got_pool = client.get_storage_pool(name=f"{PARENT}/storagePools/pool1")
    assert got_pool.volume_capacity_gib == 1500 and got_pool.volume_count == 1

    # Update with a mask: only the masked fields change.
    updated = client.update_volume(
        volume=netapp_v1.Volume(name=f"{PARENT}/volumes/vol1", capacity_gib=2000, description="grown", labels={"x": "y"}),
        update_mask=field_mask_pb2.FieldMask(paths=["capacity_gib", "description"])).result(timeout=60)
    assert updated.capacity_gib == 2000 and updated.description == "grown" and not updated.labels
    assert updated.throughput_mibps == pytest.approx(125.0)

    snap = client.create_snapshot(parent=f"{PARENT}/volumes/vol1", snapshot=netapp_v1.Snapshot(description="s"),
                                  snapshot_id="snap1").result(timeout=60)
    assert snap.state == netapp_v1.Snapshot.State.READY and snap.description == "s"
    snap = client.update_snapshot(snapshot=netapp_v1.Snapshot(name=f"{PARENT}/volumes/vol1/snapshots/snap1", labels={"a": "b"}),
                                  update_mask=field_mask_pb2.FieldMask(paths=["labels"])).result(timeout=60)
    assert snap.labels["a"] == "b" and snap.description == "s"
    names = [s.name for s in client.list_snapshots(parent=f"{PARENT}/volumes/vol1")]
    assert names == [f"{PARENT}/volumes/vol1/snapshots/snap1"]


def test_list_with_paging_filter_order(basin):
    client = basin.client()
    make_pool(client, "pagepool", 100)
    for i in range(5):
        make_volume(client, f"page{i}", "pagepool", 1, labels={"group": "paging"})
    pager = client.list_volumes(request={"parent": PARENT, "page_size": 2, "filter": 'labels.group = "paging"'})
    assert [v.name.rsplit("/", 1)[1] for v in pager] == [f"page{i}" for i in range(5)]
    pages = list(client.list_volumes(request={"parent": PARENT, "page_size": 2, "filter": 'labels.group="paging"'}).pages)
    assert len(pages) == 3
    desc = client.list_volumes(request={"parent": PARENT, "filter": "storage_pool = pagepool", "order_by": "name desc"})
    assert [v.name.rsplit("/", 1)[1] for v in desc] == [f"page{i}" for i in reversed(range(5))]


def test_revert_and_clone(basin):
    client = basin.client()
    make_pool(client, "rpool", 100)
    make_volume(client, "rvol", "rpool", 10)
    vol = f"{PARENT}/volumes/rvol"
    for s in ("s1", "s2", "s3"):
        client.create_snapshot(parent=vol, snapshot=netapp_v1.Snapshot(), snapshot_id=s).result(timeout=60)
    reverted = client.revert_volume(request=netapp_v1.RevertVolumeRequest(name=vol, snapshot_id="s2")).result(timeout=60)
    assert reverted.state == netapp_v1.Volume.State.READY
    assert [s.name.rsplit("/", 1)[1] for s in client.list_snapshots(parent=vol)] == ["s1", "s2"]

    clone = make_volume(client, "rclone", "rpool", 20,
                        restore_parameters=netapp_v1.RestoreParameters(source_snapshot=f"{vol}/snapshots/s1"))
    assert clone.state == netapp_v1.Volume.State.READY
    assert clone.clone_details.source_snapshot == f"{vol}/snapshots/s1"
    assert clone.clone_details.source_volume == vol


def test_delete_with_and_without_force(basin):
    client = basin.client()
    make_pool(client, "dpool", 100)
    make_volume(client, "dvol", "dpool", 10)
    name = f"{PARENT}/volumes/dvol"
    client.create_snapshot(parent=name, snapshot=netapp_v1.Snapshot(), snapshot_id="s1").result(timeout=60)
    with pytest.raises(exceptions.BadRequest) as e:
        client.delete_volume(name=name)
    assert e.value.code == 400 and status_of(e.value) == "FAILED_PRECONDITION"
    with pytest.raises(exceptions.BadRequest) as e:
        client.delete_storage_pool(name=f"{PARENT}/storagePools/dpool")
    assert status_of(e.value) == "FAILED_PRECONDITION"
    client.delete_volume(request={"name": name, "force": True}).result(timeout=60)
    with pytest.raises(exceptions.NotFound):
        client.get_volume(name=name)
    # A volume without snapshots needs no force.
    make_volume(client, "dvol2", "dpool", 10)
    client.delete_volume(name=f"{PARENT}/volumes/dvol2").result(timeout=60)
    client.delete_storage_pool(name=f"{PARENT}/storagePools/dpool").result(timeout=60)
    with pytest.raises(exceptions.NotFound):
        client.get_storage_pool(name=f"{PARENT}/storagePools/dpool")


def test_operation_polling_strict_parsers(basin_polled):
    """Every call answers with a running operation; result() polls GetOperation, whose
    parser rejects any field the client's protos lack."""
    client = basin_polled.client()
    op = client.create_storage_pool(parent=PARENT, storage_pool_id="ppool", storage_pool=netapp_v1.StoragePool(
        service_level=netapp_v1.ServiceLevel.EXTREME, capacity_gib=1024, network=NETWORK,
        qos_type=netapp_v1.QosType.MANUAL))
    assert not op.operation.done  # answered before the work was done: the client must poll
    pool = op.result(timeout=60)
    assert pool.qos_type == netapp_v1.QosType.MANUAL
    assert pool.available_throughput_mibps == pytest.approx(128.0)
    assert op.metadata.verb == "create" and op.metadata.api_version == "v1"

    vol = client.create_volume(parent=PARENT, volume_id="pvol", volume=netapp_v1.Volume(
        share_name="pvol", storage_pool="ppool", capacity_gib=100, protocols=[netapp_v1.Protocols.NFSV3, netapp_v1.Protocols.NFSV4],
        throughput_mibps=100)).result(timeout=60)
    assert vol.throughput_mibps == pytest.approx(100.0)
    assert client.get_storage_pool(name=f"{PARENT}/storagePools/ppool").available_throughput_mibps == pytest.approx(28.0)

    client.create_snapshot(parent=vol.name, snapshot_id="ps1", snapshot=netapp_v1.Snapshot()).result(timeout=60)
    client.delete_volume(request={"name": vol.name, "force": True}).result(timeout=60)  # Empty response

    ops = client.list_operations(request={"name": PARENT})
    assert len(ops.operations) >= 4 and all(o.done for o in ops.operations)
    newest = ops.operations[0]
    assert newest.metadata.type_url.endswith("OperationMetadata")
    got = client.get_operation(request={"name": newest.name})
    assert got.name == newest.name and got.done
    client.cancel_operation(request={"name": newest.name})  # finished: a no-op
    client.delete_operation(request={"name": newest.name})
    with pytest.raises(exceptions.NotFound):
        client.get_operation(request={"name": newest.name})


def test_active_directory_password_never_returned(basin):
    client = basin.client()
    # A DNS server inside the test range that nobody answers: the pool's join
    # finds no domain controller.
    ad = client.create_active_directory(parent=PARENT, active_directory_id="ad1", active_directory=netapp_v1.ActiveDirectory(
        domain="corp.example.com", dns="10.99.255.254", net_bios_prefix="nas", username="admin", password="Sup3rSecret!")).result(timeout=60)
    assert ad.domain == "corp.example.com" and ad.password == ""
    assert client.get_active_directory(name=ad.name).password == ""
    assert "Sup3rSecret!" not in basin.log()
    # A pool with the policy joins the domain: refused in plain words, shown on the
    # policy, and the password still nowhere.
    with pytest.raises(exceptions.FailedPrecondition) as e:  # the operation's error, code 9
        make_pool(client, "adpool", 10, active_directory=ad.name)
    assert "domain controller" in str(e.value)
    failed = client.get_active_directory(name=ad.name)
    assert failed.state == netapp_v1.ActiveDirectory.State.ERROR and "domain controller" in failed.state_details
    assert "Sup3rSecret!" not in basin.log() and "Sup3rSecret!" not in str(e.value)
    # The failed create took its pool back: the policy is in no use and goes.
    client.delete_active_directory(name=ad.name).result(timeout=60)


@pytest.mark.parametrize("call,exc,http,code", [
    ("duplicate pool", exceptions.Conflict, 409, "ALREADY_EXISTS"),
    ("bad pool id", exceptions.BadRequest, 400, "INVALID_ARGUMENT"),
    ("pool too small", exceptions.BadRequest, 400, "INVALID_ARGUMENT"),
    ("volume over pool capacity", exceptions.BadRequest, 400, "FAILED_PRECONDITION"),
    ("volume below minimum", exceptions.BadRequest, 400, "INVALID_ARGUMENT"),
    ("duplicate share name", exceptions.Conflict, 409, "ALREADY_EXISTS"),
    ("missing volume", exceptions.NotFound, 404, "NOT_FOUND"),
    ("immutable field in mask", exceptions.BadRequest, 400, "INVALID_ARGUMENT"),
    ("unknown field in mask", exceptions.BadRequest, 400, "INVALID_ARGUMENT"),
    ("revert to missing snapshot", exceptions.NotFound, 404, "NOT_FOUND"),
    ("bad filter", exceptions.BadRequest, 400, "INVALID_ARGUMENT"),
    ("out-of-scope method", exceptions.MethodNotImplemented, 501, "UNIMPLEMENTED"),
    ("unknown location", exceptions.NotFound, 404, "NOT_FOUND"),
])
def test_error_statuses(basin, call, exc, http, code):
    client = basin.client()
    try:
        make_pool(client, "epool", 50)
        make_volume(client, "evol", "epool", 10)
    except exceptions.Conflict:
        pass  # made by an earlier case
    calls = {
        "duplicate pool": lambda: make_pool(client, "epool", 50),
        "bad pool id": lambda: make_pool(client, "Bad_Id", 50),
        "pool too small": lambda: make_pool(client, "tiny", 0),
        "volume over pool capacity": lambda: make_volume(client, "huge", "epool", 41),
        "volume below minimum": lambda: make_volume(client, "zero", "epool", 0),
        "duplicate share name": lambda: client.create_volume(parent=PARENT, volume_id="evol2", volume=netapp_v1.Volume(
            share_name="evol", storage_pool="epool", capacity_gib=1, protocols=[netapp_v1.Protocols.NFSV3])),
        "missing volume": lambda: client.get_volume(name=f"{PARENT}/volumes/nope"),
        "immutable field in mask": lambda: client.update_volume(
            volume=netapp_v1.Volume(name=f"{PARENT}/volumes/evol", share_name="other"),
            update_mask=field_mask_pb2.FieldMask(paths=["share_name"])),
        "unknown field in mask": lambda: client.update_volume(
            volume=netapp_v1.Volume(name=f"{PARENT}/volumes/evol"), update_mask=field_mask_pb2.FieldMask(paths=["no_such_field"])),
        "revert to missing snapshot": lambda: client.revert_volume(
            request=netapp_v1.RevertVolumeRequest(name=f"{PARENT}/volumes/evol", snapshot_id="nope")),
        "bad filter": lambda: list(client.list_volumes(request={"parent": PARENT, "filter": "state = (READY"})),
        "out-of-scope method": lambda: list(client.list_replications(parent=f"{PARENT}/volumes/evol")),
        "unknown location": lambda: list(client.list_volumes(parent="projects/p1/locations/mars")),
    }
    with pytest.raises(exc) as e:
        calls[call]()
    assert e.value.code == http
    assert status_of(e.value) == code
    # Nothing half-created.
    names = {v.name.rsplit("/", 1)[1] for v in client.list_volumes(parent=PARENT)}
    assert not names & {"huge", "zero", "evol2"}


def test_unauthenticated(basin, forged_key):
    client = basin.client(key_file=forged_key)
    with pytest.raises(exceptions.Unauthorized) as e:
        client.list_storage_pools(parent=PARENT)
    assert e.value.code == 401 and status_of(e.value) == "UNAUTHENTICATED"
