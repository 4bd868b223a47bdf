package smb

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Dialects a readiness probe offers: SMB 2.0.2 to 3.0.2, which need no
// negotiate contexts (3.1.1 does). A server that answers with one of them has
// accepted the connection, started a process for it and run its protocol code.
var probeDialects = []uint16{0x0202, 0x0210, 0x0300, 0x0302}

// negotiateRequest is an SMB2 NEGOTIATE request behind its direct-TCP
// (RFC 1002 session message) header: a 64-byte SMB2 header with command 0 and
// message id 0, and a 36-byte body plus two bytes per dialect ([MS-SMB2]
// 2.2.3); signing enabled, no capabilities, a fixed client GUID.
func negotiateRequest() []byte {
	var b bytes.Buffer
	n := 64 + 36 + 2*len(probeDialects)
	b.Write([]byte{0, byte(n >> 16), byte(n >> 8), byte(n)})
	h := make([]byte, 64)
	copy(h, "\xfeSMB")
	binary.LittleEndian.PutUint16(h[4:], 64) // StructureSize
	binary.LittleEndian.PutUint16(h[14:], 1) // CreditRequest
	b.Write(h)
	body := make([]byte, 36)
	binary.LittleEndian.PutUint16(body[0:], 36)                         // StructureSize
	binary.LittleEndian.PutUint16(body[2:], uint16(len(probeDialects))) // DialectCount
	binary.LittleEndian.PutUint16(body[4:], 1)                          // SecurityMode: signing enabled
	copy(body[12:28], "basin-readiness!")                               // ClientGuid
	b.Write(body)
	for _, d := range probeDialects {
		binary.Write(&b, binary.LittleEndian, d) //nolint:errcheck // a bytes.Buffer does not fail
	}
	return b.Bytes()
}

// Negotiate sends an SMB2 NEGOTIATE on conn and returns the dialect the server
// chose: the readiness probe of an smbd, which answers only once it listens,
// forked a process for the connection and that process runs. It is a probe, not
// a client: no session follows. The answer must be a successful SMB2 NEGOTIATE
// response naming one of the offered dialects. ctx bounds the exchange (and
// sets conn's deadline).
func Negotiate(ctx context.Context, conn net.Conn) (uint16, error) {
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
		defer conn.SetDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := conn.Write(negotiateRequest()); err != nil {
		return 0, fmt.Errorf("smb2 negotiate: send: %w", err)
	}
	var nb [4]byte
	if _, err := io.ReadFull(conn, nb[:]); err != nil {
		return 0, fmt.Errorf("smb2 negotiate: no answer: %w", err)
	}
	n := int(nb[1])<<16 | int(nb[2])<<8 | int(nb[3])
	if nb[0] != 0 || n < 64+65 || n > 1<<16 {
		return 0, fmt.Errorf("smb2 negotiate: not an SMB2 answer (header % x)", nb)
	}
	msg := make([]byte, n)
	if _, err := io.ReadFull(conn, msg); err != nil {
		return 0, fmt.Errorf("smb2 negotiate: short answer: %w", err)
	}
	return ParseNegotiateResponse(msg)
}

// ParseNegotiateResponse checks an SMB2 NEGOTIATE response (without its
// direct-TCP header) and returns its dialect.
func ParseNegotiateResponse(msg []byte) (uint16, error) {
	if len(msg) < 64+65 || !bytes.Equal(msg[:4], []byte("\xfeSMB")) {
		return 0, errors.New("smb2 negotiate: not an SMB2 message")
	}
	const serverToRedir = 1
	status := binary.LittleEndian.Uint32(msg[8:])
	cmd := binary.LittleEndian.Uint16(msg[12:])
	flags := binary.LittleEndian.Uint32(msg[16:])
	switch {
	case cmd != 0:
		return 0, fmt.Errorf("smb2 negotiate: answer to command %d", cmd)
	case flags&serverToRedir == 0:
		return 0, errors.New("smb2 negotiate: not a response")
	case status != 0:
		return 0, fmt.Errorf("smb2 negotiate: status 0x%08x", status)
	}
	body := msg[64:]
	if size := binary.LittleEndian.Uint16(body); size != 65 {
		return 0, fmt.Errorf("smb2 negotiate: response structure size %d", size)
	}
	dialect := binary.LittleEndian.Uint16(body[4:])
	for _, d := range probeDialects {
		if d == dialect {
			return dialect, nil
		}
	}
	return 0, fmt.Errorf("smb2 negotiate: dialect 0x%04x was not offered", dialect)
}
