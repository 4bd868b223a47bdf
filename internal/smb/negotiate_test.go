package smb

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// negotiateResponse builds an SMB2 NEGOTIATE response (without the direct-TCP
// header) with the given status, command, flags and dialect.
func negotiateResponse(status uint32, cmd uint16, flags uint32, dialect uint16) []byte {
	msg := make([]byte, 64+65)
	copy(msg, "\xfeSMB")
	binary.LittleEndian.PutUint16(msg[4:], 64)
	binary.LittleEndian.PutUint32(msg[8:], status)
	binary.LittleEndian.PutUint16(msg[12:], cmd)
	binary.LittleEndian.PutUint32(msg[16:], flags)
	binary.LittleEndian.PutUint16(msg[64:], 65)
	binary.LittleEndian.PutUint16(msg[68:], dialect)
	return msg
}

func TestNegotiateRequest(t *testing.T) {
	req := negotiateRequest()
	n := int(req[1])<<16 | int(req[2])<<8 | int(req[3])
	if req[0] != 0 || n != len(req)-4 {
		t.Fatalf("session header % x for %d bytes", req[:4], len(req)-4)
	}
	h, body := req[4:68], req[68:]
	if string(h[:4]) != "\xfeSMB" || binary.LittleEndian.Uint16(h[4:]) != 64 || binary.LittleEndian.Uint16(h[12:]) != 0 {
		t.Fatalf("header % x", h)
	}
	if binary.LittleEndian.Uint16(body) != 36 || int(binary.LittleEndian.Uint16(body[2:])) != len(probeDialects) ||
		len(body) != 36+2*len(probeDialects) {
		t.Fatalf("body % x", body)
	}
	for i, d := range probeDialects {
		if got := binary.LittleEndian.Uint16(body[36+2*i:]); got != d {
			t.Errorf("dialect %d = %#x, want %#x", i, got, d)
		}
	}
}

func TestNegotiate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answer  []byte // nil: the server says nothing
		dialect uint16
		err     string
	}{
		{"smb 3.0.2", negotiateResponse(0, 0, 1, 0x0302), 0x0302, ""},
		{"smb 2.1", negotiateResponse(0, 0, 1, 0x0210), 0x0210, ""},
		{"refused", negotiateResponse(0xc0000022, 0, 1, 0), 0, "status 0xc0000022"},
		{"other command", negotiateResponse(0, 1, 1, 0x0302), 0, "command 1"},
		{"not a response", negotiateResponse(0, 0, 0, 0x0302), 0, "not a response"},
		{"dialect not offered", negotiateResponse(0, 0, 1, 0x0311), 0, "not offered"},
		{"smb1", append([]byte("\xffSMB"), make([]byte, 200)...), 0, "not an SMB2 message"},
		{"silent", nil, 0, "no answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := net.Pipe()
			defer client.Close()
			go func() {
				defer server.Close()
				req := make([]byte, len(negotiateRequest()))
				if _, err := io.ReadFull(server, req); err != nil || tc.answer == nil {
					io.Copy(io.Discard, server)
					return
				}
				n := len(tc.answer)
				server.Write(append([]byte{0, byte(n >> 16), byte(n >> 8), byte(n)}, tc.answer...))
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			d, err := Negotiate(ctx, client)
			if tc.err == "" {
				if err != nil || d != tc.dialect {
					t.Fatalf("Negotiate = %#x, %v; want %#x", d, err, tc.dialect)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("Negotiate = %#x, %v; want an error with %q", d, err, tc.err)
			}
		})
	}
}

func FuzzParseNegotiateResponse(f *testing.F) {
	f.Add(negotiateResponse(0, 0, 1, 0x0302))
	f.Add(negotiateResponse(0xc0000022, 0, 1, 0))
	f.Add([]byte("\xfeSMB"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		d, err := ParseNegotiateResponse(msg)
		if err == nil && d == 0 {
			t.Fatal("no error and no dialect")
		}
	})
}
