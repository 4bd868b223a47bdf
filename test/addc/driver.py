# Runs samba-tool commands inside one Python process. The commands come as JSON on
# stdin ({"cmds": [[arg, ...], ...]}) so that the passwords some of them carry never
# appear in a process's argv. "@@SID:<name>@@" in an argument becomes the objectSid
# of the account <name> (looked up in the sam.ldb of the command's -s smb.conf). A
# failure names the command (its first two words, never its arguments) and stops.
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


def resolve(argv):
    conf = argv[argv.index("-s") + 1] if "-s" in argv else None
    return [SID_RE.sub(lambda m: sid_of(m.group(1), conf), a) for a in argv]

req = json.load(sys.stdin)
for argv in req["cmds"]:
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
