# Basin's channel to a Ceph cluster's monitors and managers: one RADOS client
# kept open, commands in, answers out, one JSON document per line. Each request
# is {"target": "mon" | "mgr", "cmd": {...}, "timeout": seconds}; each answer
# {"rc": 0 or -errno, "out": stdout, "err": status text}. A request with
# "cmds": [{...}, ...] instead runs them all at once and is answered
# {"answers": [answer, ...]}, in order. Ceph's own Python
# bindings (python3-rados) do the talking, as Ceph's CLI does.
import json
import sys
import threading

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
        timeout = int(req.get("timeout") or 0)
        if "cmds" in req:
            # A batch: every command sent at once, each answered in its
            # place. The monitors commit what arrives together in one map,
            # where commands one after the other wait for a map each.
            answers = [None] * len(req["cmds"])

            def one(i, cmd):
                try:
                    answers[i] = run(cluster, req["target"], cmd, timeout)
                except BaseException as e:  # never a missing answer: Go would read it as success
                    answers[i] = {"rc": -5, "out": "", "err": "helper: " + repr(e)}

            threads = [threading.Thread(target=one, args=(i, c)) for i, c in enumerate(req["cmds"])]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            print(json.dumps({"answers": answers}), flush=True)
            continue
        print(json.dumps(run(cluster, req["target"], req["cmd"], timeout)), flush=True)


def run(cluster, target, cmd, timeout):
    try:
        if target == "mgr":
            rc, out, err = cluster.mgr_command(json.dumps(cmd), b"", timeout=timeout)
        else:
            rc, out, err = cluster.mon_command(json.dumps(cmd), b"", timeout=timeout)
    except rados.Error as e:
        rc, out, err = -(getattr(e, "errno", None) or 5), b"", str(e)
    return {"rc": rc, "out": text(out), "err": text(err)}


main()
