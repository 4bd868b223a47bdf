# Runs samba-tool commands inside one Python process. The commands come as JSON on
# stdin ({"cmds": [[arg, ...], ...]}) so that the passwords some of them carry never
# appear in a process's argv. With "rewrite_a": {"conf", "old", "new"} it first
# changes every DNS A record of the domain's and forest's DNS partitions that holds
# the address old to new (offline, in the sam.ldb of that smb.conf): a copy of a
# template provisioned for another address. "@@SID:<name>@@" in an argument
# becomes the objectSid of the account <name> (looked up in the sam.ldb of the
# command's -s smb.conf). A failure names the command (its first two words, never
# its arguments) and stops.
import json
import re
import sys

from samba.netcmd.main import cmd_sambatool

SID_RE = re.compile(r"@@SID:([^@]+)@@")


def sid_of(name, conf):
    from samba.auth import system_session
    from samba.dcerpc import security
    from samba.ndr import ndr_unpack
    from samba.param import LoadParm
    from samba.samdb import SamDB

    lp = LoadParm()
    lp.load(conf)
    db = SamDB(url=lp.samdb_url(), session_info=system_session(), lp=lp)
    res = db.search(base=db.domain_dn(), expression="(sAMAccountName=%s)" % name, attrs=["objectSid"])
    return str(ndr_unpack(security.dom_sid, res[0]["objectSid"][0]))


def rewrite_a(conf, old, new):
    import ldb
    from samba.auth import system_session
    from samba.dcerpc import dnsp
    from samba.ndr import ndr_pack, ndr_unpack
    from samba.param import LoadParm
    from samba.samdb import SamDB

    lp = LoadParm()
    lp.load(conf)
    db = SamDB(url=lp.samdb_url(), session_info=system_session(), lp=lp)
    n = 0
    for zone in ("DomainDnsZones", "ForestDnsZones"):
        base = "DC=%s,%s" % (zone, db.domain_dn())
        for m in db.search(base=base, expression="(objectClass=dnsNode)", attrs=["dnsRecord"]):
            if "dnsRecord" not in m:
                continue
            recs, changed = [], False
            for v in m["dnsRecord"]:
                r = ndr_unpack(dnsp.DnssrvRpcRecord, v)
                if r.wType == dnsp.DNS_TYPE_A and r.data == old:
                    r.data = new
                    changed = True
                    n += 1
                recs.append(ndr_pack(r))
            if changed:
                msg = ldb.Message(m.dn)
                msg["dnsRecord"] = ldb.MessageElement(recs, ldb.FLAG_MOD_REPLACE, "dnsRecord")
                db.modify(msg)
    if n == 0:
        print("addc driver: no A record holds %s" % old, file=sys.stderr)
        sys.exit(1)


def resolve(argv):
    conf = argv[argv.index("-s") + 1] if "-s" in argv else None
    return [SID_RE.sub(lambda m: sid_of(m.group(1), conf), a) for a in argv]

req = json.load(sys.stdin)
if "rewrite_a" in req:
    rewrite_a(**req["rewrite_a"])
for argv in req.get("cmds", []):
    what = " ".join(argv[:2])
    cmd = cmd_sambatool()
    try:
        rc = cmd._run("samba-tool", *resolve(argv))
    except SystemExit as e:
        rc = e.code
    except Exception as e:  # what samba-tool's main does
        cmd.show_command_error(e)
        rc = 1
    if rc:
        print("addc driver: samba-tool %s: exit %s" % (what, rc), file=sys.stderr)
        sys.exit(1)
    sys.stdout.flush()
