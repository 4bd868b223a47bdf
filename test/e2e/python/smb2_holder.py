"""An SMB2 client driven line by line, for the cross-protocol tests (test/e2e
crossproto_test.go): it asks for oplocks, waits for their breaks and takes
byte-range locks, which go-smb2 does not do, and Samba's Python bindings do
only on SMB1 connections (Basin refuses SMB1).

    smb2_holder.py SERVER ADDRESS SHARE DOMAIN USER      (password in BASIN_SMB_PASSWORD)

Commands on stdin, one answer line each on stdout:
    open NAME SHARE_ACCESS OPLOCK   -> granted <level>    | error <NTSTATUS hex>
    openea NAME                     -> granted 0          | error <NTSTATUS hex>   (to read and write EAs)
    waitbreak SECONDS               -> break <level> <s>  | no break
    lock OFFSET LENGTH              -> lock <NTSTATUS hex>
    read OFFSET LENGTH              -> read <NTSTATUS hex> <bytes>
    setea EANAME VALUE              -> setea <NTSTATUS hex>   (on the open file)
    eas                             -> eas <NTSTATUS hex> <names, comma-separated>
    close                           -> closed
    opens NAME OPLOCK N             -> opens <per second> <levels granted, comma-separated>
                                       (N times: open NAME with OPLOCK, read its first 4 KiB, close;
                                       NAME is made 4 KiB long first: the dualproto benchmark)
    hold                            (no answer: keeps the file open, unacknowledged, until stdin ends)
SHARE_ACCESS is FILE_SHARE_* bits (1 read, 2 write, 4 delete); OPLOCK the
requested level (0 none, 1 level II, 8 exclusive, 9 batch). The file is opened
(created if need be) for reading and writing.
"""
import os
import struct
import sys
import time

from impacket import smb3, smb3structs as s2
from impacket.smbconnection import SMBConnection, SessionError

# The SMB3 layer's calls raise its own SessionError, SMBConnection's another.
ERRORS = (SessionError, smb3.SessionError)


def status(e):
    code = e.getErrorCode() if isinstance(e, SessionError) else e.get_error_code()
    return "%08x" % (code & 0xFFFFFFFF)


def watching_creates(recv, granted):
    """recv, calling granted with the oplock level of every successful CREATE
    response on its way through (SMB3.create returns the handle alone)."""
    def watch(packet_id=None):
        p = recv(packet_id)
        if p["Command"] == s2.SMB2_CREATE and p["Status"] == 0:
            granted(s2.SMB2Create_Response(p["Data"])["OplockLevel"])
        return p
    return watch


def main():
    server, address, share, domain, user = sys.argv[1:6]
    conn = SMBConnection(server, address, sess_port=445, timeout=120)
    conn.login(user, os.environ["BASIN_SMB_PASSWORD"], domain)
    tid = conn.connectTree(share)
    smb = conn.getSMBServer()
    recv = smb.recvSMB
    fid = None
    out = lambda s: print(s, flush=True)

    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "open":
            # SMB3.create returns the handle alone; the granted level is in
            # the response, seen on its way through recvSMB.
            granted = {}
            smb.recvSMB = watching_creates(recv, lambda level: granted.__setitem__("level", level))
            try:
                fid = smb.create(tid, cmd[1], s2.FILE_READ_DATA | s2.FILE_WRITE_DATA | s2.FILE_READ_ATTRIBUTES,
                                 int(cmd[2]), s2.FILE_NON_DIRECTORY_FILE, s2.FILE_OPEN_IF,
                                 s2.FILE_ATTRIBUTE_NORMAL, oplockLevel=int(cmd[3]))
                out("granted %d" % granted.get("level", -1))
            except ERRORS as e:
                out("error " + status(e))
            finally:
                smb.recvSMB = recv
        elif cmd[0] == "openea":
            try:
                fid = smb.create(tid, cmd[1], s2.FILE_READ_DATA | s2.FILE_WRITE_DATA | s2.FILE_READ_ATTRIBUTES |
                                 s2.FILE_READ_EA | s2.FILE_WRITE_EA, 7, s2.FILE_NON_DIRECTORY_FILE, s2.FILE_OPEN_IF,
                                 s2.FILE_ATTRIBUTE_NORMAL)
                out("granted 0")
            except ERRORS as e:
                out("error " + status(e))
        elif cmd[0] == "waitbreak":
            start = time.monotonic()
            smb._timeout = float(cmd[1])
            # recvSMB moves the next message id by the packet's credit
            # charge less one, as for a response to a request; a break
            # notification is none (charge 0), and the next request would
            # reuse an id (smbd drops the connection).
            window = smb._Connection["SequenceWindow"]
            try:
                while True:
                    p = smb.recvSMB()
                    smb._Connection["SequenceWindow"] = window
                    if p["Command"] == s2.SMB2_OPLOCK_BREAK:
                        n = s2.SMB2OplockBreakNotification(p["Data"])
                        out("break %d %.3f" % (n["OplockLevel"], time.monotonic() - start))
                        break
            except Exception:  # the receive timed out
                out("no break")
            finally:
                smb._timeout = 120
        elif cmd[0] == "lock":
            # Built here: impacket's SMB3.lock joins its elements as str.
            el = s2.SMB2_LOCK_ELEMENT()
            el["Offset"], el["Length"] = int(cmd[1]), int(cmd[2])
            el["Flags"] = s2.SMB2_LOCKFLAG_EXCLUSIVE_LOCK | s2.SMB2_LOCKFLAG_FAIL_IMMEDIATELY
            req = s2.SMB2Lock()
            req["FileID"], req["LockCount"], req["LockSequence"] = fid, 1, 0
            req["Locks"] = el.getData()
            packet = smb.SMB_PACKET()
            packet["Command"], packet["TreeID"], packet["Data"] = s2.SMB2_LOCK, tid, req
            ans = smb.recvSMB(smb.sendSMB(packet))
            out("lock %08x" % (ans["Status"] & 0xFFFFFFFF))
        elif cmd[0] == "read":
            try:
                data = smb.read(tid, fid, int(cmd[1]), int(cmd[2]))
                out("read 00000000 %d" % len(data))
            except ERRORS as e:
                out("read %s 0" % status(e))
        elif cmd[0] == "setea":
            # One FILE_FULL_EA_INFORMATION entry (MS-FSCC 2.4.15).
            name, value = cmd[1].encode(), cmd[2].encode()
            blob = struct.pack("<IBBH", 0, 0, len(name), len(value)) + name + b"\0" + value
            try:
                smb.setInfo(tid, fid, blob, s2.SMB2_0_INFO_FILE, s2.SMB2_FULL_EA_INFO)
                out("setea 00000000")
            except ERRORS as e:
                out("setea " + status(e))
        elif cmd[0] == "eas":
            try:
                buf = smb.queryInfo(tid, fid, infoType=s2.SMB2_0_INFO_FILE, fileInfoClass=s2.SMB2_FULL_EA_INFO)
                names, off = [], 0
                while off + 8 <= len(buf):
                    nxt, _, nlen, _ = struct.unpack_from("<IBBH", buf, off)
                    names.append(bytes(buf[off + 8:off + 8 + nlen]).decode(errors="replace"))
                    if nxt == 0:
                        break
                    off += nxt
                out("eas 00000000 " + ",".join(names))
            except ERRORS as e:
                out("eas %s " % status(e))
        elif cmd[0] == "opens":
            name, level, n = cmd[1], int(cmd[2]), int(cmd[3])
            access = s2.FILE_READ_DATA | s2.FILE_WRITE_DATA | s2.FILE_READ_ATTRIBUTES
            f = smb.create(tid, name, access, 7, s2.FILE_NON_DIRECTORY_FILE, s2.FILE_OPEN_IF, s2.FILE_ATTRIBUTE_NORMAL)
            smb.write(tid, f, b"x" * 4096, 0, 4096)
            smb.close(tid, f)
            levels = set()
            smb.recvSMB = watching_creates(recv, levels.add)
            try:
                start = time.monotonic()
                for _ in range(n):
                    f = smb.create(tid, name, access, 7, s2.FILE_NON_DIRECTORY_FILE, s2.FILE_OPEN,
                                   s2.FILE_ATTRIBUTE_NORMAL, oplockLevel=level)
                    smb.read(tid, f, 0, 4096)
                    smb.close(tid, f)
                took = time.monotonic() - start
                out("opens %.1f %s" % (n / took, ",".join(str(v) for v in sorted(levels))))
            except ERRORS as e:
                out("error " + status(e))
            finally:
                smb.recvSMB = recv
        elif cmd[0] == "close":
            smb.close(tid, fid)
            fid = None
            out("closed")
        elif cmd[0] == "hold":
            sys.stdin.read()
            return
        else:
            out("unknown " + cmd[0])


main()
