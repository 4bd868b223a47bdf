"""Starts real `basin serve` processes for the end-to-end tests (needs root)."""
import datetime
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request

import grpc
import pytest
from google.api_core.client_options import ClientOptions
from google.cloud import netapp_v1
from google.cloud.netapp_v1.services.net_app.transports import NetAppGrpcTransport
from google.oauth2 import service_account

BASIN_BIN = os.environ.get("BASIN_BIN", os.path.join(os.path.dirname(__file__), "../../../bin/basin"))
LOCATION = "us-east4"
PARENT = f"projects/p1/locations/{LOCATION}"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def offline(creds):
    """Keeps google-auth from looking up the account's "regional access boundary" at
    Google's IAM endpoint (a background call, pointless for Basin): tests send no
    traffic off this machine. Uses the hook gcloud relies on (stable contract)."""
    if hasattr(creds, "_set_regional_access_boundary"):
        # google-auth compares naive UTC times here.
        far = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None) + datetime.timedelta(days=1)
        creds._set_regional_access_boundary({"encodedLocations": "0x0", "expiry": far})
    return creds


_networks = iter(range(200, 250))


class Basin:
    """One basin serve process on a fresh data directory, with a network of its own
    (bridge and subnet), so that several can run side by side."""

    def __init__(self, *extra_args):
        if os.geteuid() != 0:
            pytest.skip("the end-to-end tests need root (loop devices, mounts, btrfs quota)")
        self.data_dir = tempfile.mkdtemp(prefix="basin-py-")
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(self.data_dir, "serve.log")
        self.network = f"default=bpy{self.port},10.99.{next(_networks)}.0/24"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [BASIN_BIN, "serve", "--data-dir", self.data_dir, "--listen", f"127.0.0.1:{self.port}",
             # The tests make pools of up to 2 TiB on a 4 GiB store: let pools
             # promise far more than the store holds (thin provisioning; each
             # volume's filesystem starts at 128 MiB at most).
             "--store-size", "4G", "--overcommit-ratio", "10000", "--thin-initial", "128M", "--location", LOCATION,
             "--network", self.network,
             # Basin leaves its data plane serving when it stops (a restart keeps
             # every client); these servers go for good.
             "--teardown-on-exit", *extra_args],
            stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while True:
            try:
                with urllib.request.urlopen(self.endpoint + "/readyz", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.time() > deadline or self.proc.poll() is not None:
                raise RuntimeError("basin serve did not become ready:\n" + open(self.log_path).read())
            time.sleep(0.05)
        self.key_file = os.path.join(self.data_dir, "owner-key.json")

    def client(self, key_file=None):
        creds = service_account.Credentials.from_service_account_file(key_file or self.key_file)
        offline(creds)
        return netapp_v1.NetAppClient(credentials=creds, transport="rest",
                                      client_options=ClientOptions(api_endpoint=self.endpoint))

    def grpc_client(self, endpoint, key_file=None):
        """The client on its default transport, gRPC, at endpoint (HOST:PORT, the
        server's --grpc-listen), trusting the CA Basin issued the listener's
        certificate from (DATA_DIR/grpc-ca.pem), as docs/grpc.md tells users to."""
        creds = service_account.Credentials.from_service_account_file(key_file or self.key_file)
        offline(creds)
        with open(os.path.join(self.data_dir, "grpc-ca.pem"), "rb") as f:
            tls = grpc.ssl_channel_credentials(root_certificates=f.read())
        return netapp_v1.NetAppClient(transport=NetAppGrpcTransport(host=endpoint, credentials=creds, ssl_channel_credentials=tls))

    def log(self):
        return open(self.log_path).read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)
        self._log.close()
        try:
            assert self.proc.returncode == 0, self.log()
            with open("/proc/self/mountinfo") as f:
                assert self.data_dir not in f.read(), "mounts left behind"
        finally:
            # Whatever the assertions found, leave the host as found: `basin
            # teardown` takes down what a server left running (nothing, if it
            # stopped as it should).
            subprocess.run([BASIN_BIN, "teardown", "--data-dir", self.data_dir, "--network", self.network],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        shutil.rmtree(self.data_dir)


@pytest.fixture(scope="session")
def basin():
    """A server with default settings: fast operations complete in the first answer."""
    b = Basin()
    yield b
    b.stop()


@pytest.fixture(scope="session")
def basin_polled():
    """A server that always answers with running operations, so the client polls
    them through GetOperation (a strict parser)."""
    b = Basin("--sync-wait", "0s")
    yield b
    b.stop()


@pytest.fixture(scope="module")
def basin_own():
    """A server for one test module alone (its resource names clash with others')."""
    b = Basin()
    yield b
    b.stop()


def forge_key(b, tmp_path):
    """Server b's owner key file with an unknown key id, written under tmp_path."""
    kf = json.load(open(b.key_file))
    kf["private_key_id"] = "0" * 40
    path = tmp_path / "forged.json"
    path.write_text(json.dumps(kf))
    return str(path)


@pytest.fixture
def forged_key(basin, tmp_path):
    """The owner's key file with an unknown key id."""
    return forge_key(basin, tmp_path)
