"""The grpc section's official-client half (test/bench/grpc.go): Google's Python
client, google-cloud-netapp, GETs one volume over its REST transport and over
its default one, gRPC, against one server serving both, the calls alternating
between the transports (which goes first alternating too). Both clients sign
their calls with the same key file, as users give it them.

Usage: python netapp_transports.py REST_URL GRPC_ADDR CA_FILE KEY_FILE VOLUME ROUNDS GETS
Prints a JSON line per round: each transport's GET median and 99th percentile, in ms."""
import datetime
import statistics
import json
import math
import sys
import time

import grpc
from google.api_core.client_options import ClientOptions
from google.cloud import netapp_v1
from google.cloud.netapp_v1.services.net_app.transports import NetAppGrpcTransport
from google.oauth2 import service_account


def credentials(key_file):
    creds = service_account.Credentials.from_service_account_file(key_file)
    # No lookup of the account's "regional access boundary" at Google: this
    # machine sends nothing off it (as test/e2e/python/conftest.py's offline).
    if hasattr(creds, "_set_regional_access_boundary"):
        far = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None) + datetime.timedelta(days=1)
        creds._set_regional_access_boundary({"encodedLocations": "0x0", "expiry": far})
    return creds


def percentile(xs, q):
    """The q-th quantile as test/bench's percentile (store.go) takes it."""
    s = sorted(xs)
    return s[max(0, min(math.ceil(q * len(s)) - 1, len(s) - 1))]


def main():
    rest_url, grpc_addr, ca_file, key_file, volume, rounds, gets = sys.argv[1:8]
    rest = netapp_v1.NetAppClient(credentials=credentials(key_file), transport="rest",
                                  client_options=ClientOptions(api_endpoint=rest_url))
    with open(ca_file, "rb") as f:
        tls = grpc.ssl_channel_credentials(root_certificates=f.read())
    over_grpc = netapp_v1.NetAppClient(transport=NetAppGrpcTransport(
        host=grpc_addr, credentials=credentials(key_file), ssl_channel_credentials=tls))
    clients = [("rest", rest), ("grpc", over_grpc)]
    for _ in range(50):  # connections, the TLS handshake, the signed tokens
        for _, c in clients:
            c.get_volume(name=volume)
    for _ in range(int(rounds)):
        took = {"rest": [], "grpc": []}
        for i in range(int(gets)):
            for name, c in (clients if i % 2 == 0 else clients[::-1]):
                start = time.perf_counter()
                c.get_volume(name=volume)
                took[name].append((time.perf_counter() - start) * 1e3)
        print(json.dumps({name: {"p50": statistics.median(t), "p99": percentile(t, 0.99)} for name, t in took.items()}), flush=True)


if __name__ == "__main__":
    main()
