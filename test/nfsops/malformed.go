package nfsops

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"time"

	"github.com/basin-nas/basin/internal/oncrpc"
)

// Malformed are calls a server must answer without filling its log: NFSv4
// COMPOUNDs with a minor version that does not exist, a tag that is not UTF-8,
// no operation or too many (101, one over Ganesha's limit), NFSv3 calls whose
// arguments do not decode, a procedure, a version and a program the server
// does not have, and an AUTH_SYS credential that does not decode. Each is a
// whole record, xid 0 (Flood rewrites it).
func Malformed() [][]byte {
	cred := oncrpc.AuthSys{Machine: "malformed"}.Cred()
	call := func(prog, vers, proc uint32, cred []byte, args func(e *enc)) []byte {
		var e enc
		args(&e)
		return append(oncrpc.CallHeader(0, prog, vers, proc, cred, len(e.Bytes())), e.Bytes()...)
	}
	compound := func(tag []byte, minor uint32, ops int) func(e *enc) {
		return func(e *enc) {
			e.Opaque(tag)
			e.U32(minor)
			e.U32(uint32(ops))
			for range ops {
				e.U32(24) // PUTROOTFH
			}
		}
	}
	badCred := []byte{0, 0, 0, 1, 0, 0, 0, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff} // AUTH_SYS, a body that does not decode
	return [][]byte{
		call(100003, 4, 1, cred, compound([]byte("x"), 7, 1)),
		call(100003, 4, 1, cred, compound([]byte{0xff, 0xfe, 0xc0}, 0, 1)),
		call(100003, 4, 1, cred, compound(nil, 0, 0)),
		call(100003, 4, 1, cred, compound(nil, 1, 101)),
		call(100003, 3, 1, cred, func(e *enc) { e.U32(1 << 30) }), // GETATTR: a handle length past the record
		call(100003, 3, 99, cred, func(e *enc) {}),
		call(100003, 9, 0, cred, func(e *enc) {}),
		call(123456, 1, 0, cred, func(e *enc) {}),
		call(100003, 3, 0, badCred, func(e *enc) {}),
	}
}

// SendMalformed sends n calls, cycling through Malformed, over one connection,
// pipelined, and returns how many were answered (a server may also drop one or
// close the connection: SendMalformed then opens another, up to n times).
func SendMalformed(ctx context.Context, dial func(ctx context.Context) (net.Conn, error), n int) (answered int, err error) {
	calls := Malformed()
	sent := 0
	for conns := 0; sent < n && conns < n; conns++ {
		c, err := dial(ctx)
		if err != nil {
			return answered, err
		}
		replies := make(chan int, 1)
		go func() {
			got := 0
			r := bufio.NewReader(c)
			for {
				if _, err := oncrpc.ReadRecord(r); err != nil {
					break
				}
				got++
			}
			replies <- got
		}()
		deadline := time.Now().Add(time.Minute)
		if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
			deadline = dl
		}
		c.SetDeadline(deadline)
		w := bufio.NewWriter(c)
		for ; sent < n; sent++ {
			rec := append([]byte(nil), calls[sent%len(calls)]...)
			xid := uint32(sent + 1)
			rec[4], rec[5], rec[6], rec[7] = byte(xid>>24), byte(xid>>16), byte(xid>>8), byte(xid)
			if _, err := w.Write(rec); err != nil {
				break
			}
		}
		werr := w.Flush()
		// Give the server the time to answer, then close: the reader ends.
		if tc, ok := c.(*net.TCPConn); ok && werr == nil {
			tc.CloseWrite()
		}
		got := <-replies
		c.Close()
		answered += got
		if werr != nil && got == 0 {
			return answered, fmt.Errorf("send: %w", werr)
		}
	}
	return answered, nil
}
