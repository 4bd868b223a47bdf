"""Role × method matrix for every v1 method, with the official Python client signing
with keys minted through Basin's IAM API (issue: identity and access)."""
import base64
import json
import os

import pytest
from google.api_core import exceptions
from google.auth import jwt
from google.auth.transport.requests import AuthorizedSession
from google.cloud import netapp_v1
from google.protobuf import field_mask_pb2

from conftest import PARENT, offline

NETWORK = "projects/p1/global/networks/default"
VIEWER_OK = {"get", "list"}


def owner_session(basin):
    creds = offline(jwt.Credentials.from_service_account_file(basin.key_file, audience="https://netapp.googleapis.com/"))
    return AuthorizedSession(creds)


def mint(basin, session, account_id, tmp_path):
    """Creates a service account and a key through the API; returns (email, key path)."""
    r = session.post(f"{basin.endpoint}/v1/projects/p1/serviceAccounts", json={"accountId": account_id})
    assert r.status_code == 200, r.text
    email = r.json()["email"]
    r = session.post(f"{basin.endpoint}/v1/projects/p1/serviceAccounts/{email}/keys", json={})
    assert r.status_code == 200, r.text
    path = tmp_path / f"{account_id}.json"
    path.write_bytes(base64.b64decode(r.json()["privateKeyData"]))
    os.chmod(path, 0o600)
    return email, str(path)


def methods(client, tag):
    """(permission, call) for every v1 method; calls use resources that exist or fail
    on their merits (404, 400, 501), never on permission, when allowed."""
    vol, pool = f"{PARENT}/volumes/vol1", f"{PARENT}/storagePools/pool1"
    snap, ad, op = f"{vol}/snapshots/s1", f"{PARENT}/activeDirectories/nope", f"{PARENT}/operations/nope"
    mask = lambda *p: field_mask_pb2.FieldMask(paths=list(p))  # noqa: E731
    return [
        ("netapp.locations.list", lambda: client.list_locations(request={"name": "projects/p1"})),
        ("netapp.locations.get", lambda: client.get_location(request={"name": PARENT})),
        ("netapp.storagePools.list", lambda: list(client.list_storage_pools(parent=PARENT))),
        ("netapp.storagePools.get", lambda: client.get_storage_pool(name=pool)),
        ("netapp.storagePools.create", lambda: client.create_storage_pool(parent=PARENT, storage_pool_id=f"p-{tag}", storage_pool=netapp_v1.StoragePool(
            service_level=netapp_v1.ServiceLevel.PREMIUM, capacity_gib=10, network=NETWORK)).result(timeout=60)),
        ("netapp.storagePools.update", lambda: client.update_storage_pool(storage_pool=netapp_v1.StoragePool(name=pool, description=tag), update_mask=mask("description"))),
        ("netapp.storagePools.delete", lambda: client.delete_storage_pool(name=f"{PARENT}/storagePools/nope")),
        ("netapp.storagePools.switch", lambda: client.switch_active_replica_zone(request={"name": pool})),
        ("netapp.storagePools.validateDirectoryService", lambda: client.validate_directory_service(request={"name": pool})),
        ("netapp.volumes.list", lambda: list(client.list_volumes(parent=PARENT))),
        ("netapp.volumes.get", lambda: client.get_volume(name=vol)),
        ("netapp.volumes.create", lambda: client.create_volume(parent=PARENT, volume_id=f"v-{tag}", volume=netapp_v1.Volume(
            share_name=f"v-{tag}", storage_pool="pool1", capacity_gib=1, protocols=[netapp_v1.Protocols.NFSV3])).result(timeout=60)),
        ("netapp.volumes.update", lambda: client.update_volume(volume=netapp_v1.Volume(name=vol, description=tag), update_mask=mask("description"))),
        ("netapp.volumes.delete", lambda: client.delete_volume(name=f"{PARENT}/volumes/nope")),
        ("netapp.volumes.revert", lambda: client.revert_volume(request={"name": vol, "snapshot_id": "nope"})),
        ("netapp.snapshots.list", lambda: list(client.list_snapshots(parent=vol))),
        ("netapp.snapshots.get", lambda: client.get_snapshot(name=snap)),
        ("netapp.snapshots.create", lambda: client.create_snapshot(parent=vol, snapshot_id=f"s-{tag}", snapshot=netapp_v1.Snapshot()).result(timeout=60)),
        ("netapp.snapshots.update", lambda: client.update_snapshot(snapshot=netapp_v1.Snapshot(name=snap, description=tag), update_mask=mask("description"))),
        ("netapp.snapshots.delete", lambda: client.delete_snapshot(name=f"{vol}/snapshots/nope")),
        ("netapp.activeDirectories.list", lambda: list(client.list_active_directories(parent=PARENT))),
        ("netapp.activeDirectories.get", lambda: client.get_active_directory(name=ad)),
        ("netapp.activeDirectories.create", lambda: client.create_active_directory(parent=PARENT, active_directory_id=f"ad-{tag}", active_directory=netapp_v1.ActiveDirectory(
            domain="corp.example.com", dns="10.0.0.2", net_bios_prefix="nas", username="u", password="Pw-For-Matrix"))),
        ("netapp.activeDirectories.update", lambda: client.update_active_directory(active_directory=netapp_v1.ActiveDirectory(name=ad, site="s"), update_mask=mask("site"))),
        ("netapp.activeDirectories.delete", lambda: client.delete_active_directory(name=ad)),
        ("netapp.operations.list", lambda: client.list_operations(request={"name": PARENT})),
        ("netapp.operations.get", lambda: client.get_operation(request={"name": op})),
        ("netapp.operations.delete", lambda: client.delete_operation(request={"name": op})),
        ("netapp.operations.cancel", lambda: client.cancel_operation(request={"name": op})),
    ]


def granted(role, perm):
    if role == "roles/netapp.admin":
        return True
    if role == "roles/netapp.viewer":
        return perm.rsplit(".", 1)[1] in VIEWER_OK
    return False


def test_role_method_matrix(basin_own, tmp_path):
    basin = basin_own
    owner = basin.client()
    owner.create_storage_pool(parent=PARENT, storage_pool_id="pool1", storage_pool=netapp_v1.StoragePool(
        service_level=netapp_v1.ServiceLevel.PREMIUM, capacity_gib=100, network=NETWORK)).result(timeout=60)
    owner.create_volume(parent=PARENT, volume_id="vol1", volume=netapp_v1.Volume(
        share_name="vol1", storage_pool="pool1", capacity_gib=1, protocols=[netapp_v1.Protocols.NFSV3])).result(timeout=60)
    owner.create_snapshot(parent=f"{PARENT}/volumes/vol1", snapshot_id="s1", snapshot=netapp_v1.Snapshot()).result(timeout=60)

    session = owner_session(basin)
    accounts = {role: mint(basin, session, name, tmp_path) for role, name in
                [("roles/netapp.viewer", "m-viewer"), ("roles/netapp.admin", "m-admin"), ("none", "m-nobody")]}
    bindings = [{"role": r, "members": [f"serviceAccount:{accounts[r][0]}"]} for r in ("roles/netapp.viewer", "roles/netapp.admin")]
    r = session.post(f"{basin.endpoint}/v1/projects/p1:setIamPolicy", json={"policy": {"bindings": bindings}})
    assert r.status_code == 200, r.text

    failures = []
    for role, (email, key) in accounts.items():
        client = basin.client(key_file=key)
        for perm, call in methods(client, role.rsplit(".", 1)[-1].replace("/", "-")):
            try:
                call()
                denied = False
            except exceptions.Forbidden as e:
                denied = True
                if perm not in str(e):
                    failures.append(f"{role} {perm}: 403 does not name the permission: {e}")
            except exceptions.GoogleAPICallError:
                denied = False  # allowed, failed on its merits (404, 400, 501)
            if denied == granted(role, perm):
                failures.append(f"{role} {perm}: {'denied' if denied else 'allowed'}")
    assert not failures, "\n".join(failures)
    # The AD password used above never reaches a log.
    assert "Pw-For-Matrix" not in basin.log()
    assert "Pw-For-Matrix" not in open(os.path.join(basin.data_dir, "audit.log")).read()
