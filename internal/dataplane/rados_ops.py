# Basin's RADOS operations for carrying an NFSv4 identity's grace to a new
# host (gracecarry.go): one RADOS client kept open on one pool and namespace,
# requests in, answers out, one JSON document per line. Each request is
# {"op": "read" | "omap" | "replace_omap" | "create", "oid": name, "data":
# base64, "omap": {key: base64}}; each answer {"rc": 0 or -errno, "err": text,
# "data": base64, "omap": {key: base64}}. Ceph's own Python bindings
# (python3-rados) do the talking.
import base64
import errno
import json
import sys

import rados

PAGE = 1000


def b64(b):
    return base64.b64encode(b).decode()


def omap(io, oid):
    out, after = {}, ""
    while True:
        with rados.ReadOpCtx() as rop:
            it, _ = io.get_omap_vals(rop, after, "", PAGE)
            io.operate_read_op(rop, oid)
            page = list(it)
        # An empty value comes as None. A page may be shorter than asked
        # (the OSD's own limits): only an empty one ends the listing.
        for k, v in page:
            out[k] = b64(v or b"")
        if not page:
            return out
        after = page[-1][0]


def do(io, req):
    op, oid = req["op"], req["oid"]
    if op == "read":
        return {"data": b64(io.read(oid, 4096))}
    if op == "omap":
        return {"omap": omap(io, oid)}
    kv = {k: base64.b64decode(v) for k, v in (req.get("omap") or {}).items()}
    with rados.WriteOpCtx() as wop:
        if op == "replace_omap":
            wop.new(rados.LIBRADOS_CREATE_IDEMPOTENT)
            io.clear_omap(wop)
        elif op == "create":
            wop.new(rados.LIBRADOS_CREATE_EXCLUSIVE)
            wop.write_full(base64.b64decode(req.get("data") or ""))
        else:
            raise ValueError("unknown op " + op)
        if kv:
            io.set_omap(wop, tuple(kv), tuple(kv.values()))
        io.operate_write_op(wop, oid)
    return {}


def main():
    conf, name, keyring, pool, ns = sys.argv[1:6]
    cluster = rados.Rados(conffile=conf, name="client." + name, conf={"keyring": keyring} if keyring else {})
    cluster.connect(timeout=15)
    io = cluster.open_ioctx(pool)
    io.set_namespace(ns)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        try:
            ans = {"rc": 0}
            ans.update(do(io, json.loads(line)))
        except rados.ObjectNotFound as e:
            ans = {"rc": -errno.ENOENT, "err": str(e)}
        except rados.ObjectExists as e:
            ans = {"rc": -errno.EEXIST, "err": str(e)}
        except rados.Error as e:
            ans = {"rc": -(getattr(e, "errno", 0) or errno.EIO), "err": str(e)}
        except (ValueError, KeyError, TypeError) as e:
            ans = {"rc": -errno.EINVAL, "err": str(e)}
        print(json.dumps(ans), flush=True)


main()
