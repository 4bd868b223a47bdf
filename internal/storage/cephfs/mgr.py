# Basin's channel to a Ceph cluster's monitors and managers: one RADOS client
# kept open, commands in, answers out, one JSON document per line. Each request
# is {"target": "mon" | "mgr", "cmd": {...}, "timeout": seconds}; each answer
# {"rc": 0 or -errno, "out": stdout, "err": status text}. Ceph's own Python
# bindings (python3-rados) do the talking, as Ceph's CLI does.
import json
import sys

import rados


def text(b):
    return b.decode("utf-8", "replace") if isinstance(b, (bytes, bytearray)) else (b or "")


def main():
    conf, name, keyring = sys.argv[1:4]
    cluster = rados.Rados(conffile=conf, name="client." + name, conf={"keyring": keyring})
    cluster.connect(timeout=15)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        cmd = json.dumps(req["cmd"])
        timeout = int(req.get("timeout") or 0)
        try:
            if req["target"] == "mgr":
                rc, out, err = cluster.mgr_command(cmd, b"", timeout=timeout)
            else:
                rc, out, err = cluster.mon_command(cmd, b"", timeout=timeout)
        except rados.Error as e:
            rc, out, err = -getattr(e, "errno", 5) or -5, b"", str(e)
        print(json.dumps({"rc": rc, "out": text(out), "err": text(err)}), flush=True)


main()
