"""MIT Kerberos's GSS-API as the acceptor of one context, for Go tests.

One request a line on stdin, one answer a line on stdout: words, each a byte
string in hex ("-" for an empty one). Requests:
  accept TOKEN         -> ok OUTPUT-TOKEN INITIATOR-NAME FLAGS
  verify MSG MIC       -> ok
  getmic MSG           -> ok MIC
  wrap CONF MSG        -> ok TOKEN ENCRYPTED   (CONF and ENCRYPTED: 00 or 01)
  unwrap TOKEN         -> ok MSG ENCRYPTED
A GSS-API failure answers "err MESSAGE". The keytab is $KRB5_KTNAME.
"""
import sys

import gssapi


def enc(b):
    return b.hex() if b else "-"


def dec(w):
    return b"" if w == "-" else bytes.fromhex(w)


def main():
    creds = gssapi.Credentials(usage="accept")
    ctx = None
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        cmd, args = words[0], [dec(w) for w in words[1:]]
        try:
            if cmd == "accept":
                ctx = gssapi.SecurityContext(creds=creds, usage="accept")
                out = ctx.step(args[0])
                ans = [out or b"", str(ctx.initiator_name).encode(), int(ctx.actual_flags).to_bytes(4, "big")]
            elif cmd == "verify":
                ctx.verify_signature(args[0], args[1])
                ans = []
            elif cmd == "getmic":
                ans = [ctx.get_signature(args[0])]
            elif cmd == "wrap":
                r = ctx.wrap(args[1], encrypt=args[0] == b"\x01")
                ans = [r.message, bytes([r.encrypted])]
            elif cmd == "unwrap":
                r = ctx.unwrap(args[0])
                ans = [r.message, bytes([r.encrypted])]
            else:
                raise ValueError("unknown request " + cmd)
            print("ok", *[enc(a) for a in ans], flush=True)
        except (gssapi.exceptions.GSSError, ValueError, IndexError) as e:
            print("err", enc(str(e).encode()), flush=True)


main()
