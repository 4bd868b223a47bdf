package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cloudsoda/go-smb2"
)

// SMB runs jobs over SMB 2/3 (github.com/hirochachacha/go-smb2): Channels sessions,
// each on its own TCP connection, job n using session n mod Channels. Concurrent
// calls on a session are in flight together (the library matches replies to
// message IDs), within the credits the server grants.
type SMB struct {
	// URL is smb://HOST[:PORT]/share[/dir].
	URL      string
	User     string
	Password string
	Domain   string
	// Protection is off, sign or encrypt. go-smb2 encrypts when the server asks it
	// to (a share with "smb encrypt = required"), so encrypt requires signing from
	// the client and checks that the server turned encryption on.
	Protection string
	Channels   int

	once     sync.Once
	sessions []*smbSession
	dir      string
	err      error
}

type smbSession struct {
	conn  *frameCounter
	sess  *smb2.Session
	share *smb2.Share
}

// Name implements Engine.
func (*SMB) Name() string { return "smb" }

// ParseSMBURL splits smb://HOST[:PORT]/share[/dir].
func ParseSMBURL(s string) (addr, share, dir string, err error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "smb" || u.Hostname() == "" || u.RawQuery != "" || u.User != nil {
		return "", "", "", fmt.Errorf("--url %q: want smb://HOST[:PORT]/share[/dir] (credentials go in --user/--password)", s)
	}
	parts := strings.SplitN(strings.Trim(u.Path, "/"), "/", 2)
	if parts[0] == "" {
		return "", "", "", fmt.Errorf("--url %q: names no share", s)
	}
	port := u.Port()
	if port == "" {
		port = "445"
	}
	if len(parts) == 2 {
		dir = strings.ReplaceAll(parts[1], "/", `\`)
	}
	return net.JoinHostPort(u.Hostname(), port), parts[0], dir, nil
}

func (e *SMB) connect(ctx context.Context) error {
	e.once.Do(func() {
		addr, share, dir, err := ParseSMBURL(e.URL)
		if err != nil {
			e.err = err
			return
		}
		e.dir = dir
		host, _, _ := net.SplitHostPort(addr)
		for range max(1, e.Channels) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				e.err = fmt.Errorf("smb: %w", err)
				return
			}
			fc := &frameCounter{Conn: c}
			dialer := &smb2.Dialer{
				Negotiator: smb2.Negotiator{RequireMessageSigning: e.Protection == "sign" || e.Protection == "encrypt"},
				Initiator:  &smb2.NTLMInitiator{User: e.User, Password: e.Password, Domain: e.Domain},
			}
			s, err := dialer.DialConn(ctx, fc, addr)
			if err != nil {
				c.Close()
				e.err = fmt.Errorf("smb session setup as %q: %w", e.User, err)
				return
			}
			sh, err := s.Mount(`\\` + host + `\` + share)
			if err != nil {
				s.Logoff()
				c.Close()
				e.err = fmt.Errorf("smb tree connect %s: %w", share, err)
				return
			}
			e.sessions = append(e.sessions, &smbSession{conn: fc, sess: s, share: sh})
		}
	})
	return e.err
}

// MaxInFlight is the most requests that were on the wire at once (sent, response
// not yet received) on one connection.
func (e *SMB) MaxInFlight() int64 {
	var m int64
	for _, s := range e.sessions {
		m = max(m, s.conn.maxSeen.Load())
	}
	return m
}

// Encrypted reports whether every connection carried only encrypted messages
// after session setup (SMB2 TRANSFORM headers).
func (e *SMB) Encrypted() bool {
	for _, s := range e.sessions {
		if s.conn.plain.Load() > 0 || s.conn.transformed.Load() == 0 {
			return false
		}
	}
	return len(e.sessions) > 0
}

// Close logs every session off.
func (e *SMB) Close() error {
	var errs []error
	for _, s := range e.sessions {
		s.share.Umount()
		errs = append(errs, s.sess.Logoff())
		s.conn.Close()
	}
	return errors.Join(errs...)
}

// Open implements Engine: files are created in the URL's directory only.
func (e *SMB) Open(ctx context.Context, j *Job, n int) ([]File, error) {
	if strings.Contains(j.Name, ":") { // a stream name on SMB
		return nil, fmt.Errorf("--name %q must not contain a path", j.Name)
	}
	if err := e.connect(ctx); err != nil {
		return nil, err
	}
	if e.Protection == "encrypt" {
		// The session setup's last exchange is the only plain one allowed.
		for _, s := range e.sessions {
			s.conn.plain.Store(0)
		}
	}
	sh := e.sessions[n%len(e.sessions)].share
	var files []File
	for i := range j.NrFiles {
		name := fmt.Sprintf("%s.%d.%d", j.Name, n, i)
		if e.dir != "" {
			name = e.dir + `\` + name
		}
		f, err := sh.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			closeAll(files)
			return nil, fmt.Errorf("open %s: %w", name, err)
		}
		files = append(files, smbFile{f})
		if j.RW != "write" && j.RW != "randwrite" {
			if err := smbLayOut(ctx, f, j.Size); err != nil {
				closeAll(files)
				return nil, fmt.Errorf("lay out %s: %w", name, err)
			}
		}
	}
	return files, nil
}

func smbLayOut(ctx context.Context, f *smb2.File, size int64) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	return extend(ctx, fi.Size(), size, func(p []byte, off int64) error {
		_, err := f.WriteAt(p, off)
		return err
	})
}

type smbFile struct{ f *smb2.File }

func (s smbFile) ReadAt(p []byte, off int64) error {
	n, err := s.f.ReadAt(p, off)
	if err == io.EOF && n == len(p) {
		err = nil
	}
	if err == nil && n != len(p) {
		err = fmt.Errorf("short read at %d", off)
	}
	return err
}

func (s smbFile) WriteAt(p []byte, off int64) error {
	_, err := s.f.WriteAt(p, off)
	return err
}

func (s smbFile) Close() error { return s.f.Close() }

// frameCounter counts SMB messages on a direct-TCP connection (each framed by a
// 4-byte length) in both directions: sent minus received is what is in flight.
type frameCounter struct {
	net.Conn
	out, in            framer
	inFlight, maxSeen  atomic.Int64
	plain, transformed atomic.Int64
	outMu              sync.Mutex
}

func (c *frameCounter) Write(p []byte) (int, error) {
	c.outMu.Lock()
	frames := c.out.feed(p, nil)
	if frames > 0 {
		n := c.inFlight.Add(int64(frames))
		for m := c.maxSeen.Load(); n > m && !c.maxSeen.CompareAndSwap(m, n); m = c.maxSeen.Load() {
		}
	}
	c.outMu.Unlock()
	return c.Conn.Write(p)
}

func (c *frameCounter) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	frames := c.in.feed(p[:n], func(first byte) {
		if first == 0xFD { // SMB2 TRANSFORM_HEADER: encrypted
			c.transformed.Add(1)
		} else {
			c.plain.Add(1)
		}
	})
	c.inFlight.Add(-int64(frames))
	return n, err
}

// framer follows a stream of length-prefixed frames.
type framer struct {
	hdr  [4]byte
	nhdr int   // header bytes seen of the next frame
	left int64 // body bytes left of the current frame
	body bool  // first body byte not yet seen
}

// feed consumes p and returns how many frames started in it; first, if not nil,
// gets each frame's first body byte.
func (f *framer) feed(p []byte, first func(byte)) int {
	frames := 0
	for len(p) > 0 {
		if f.left > 0 {
			if f.body && first != nil {
				first(p[0])
			}
			f.body = false
			k := min(int64(len(p)), f.left)
			f.left -= k
			p = p[k:]
			continue
		}
		k := copy(f.hdr[f.nhdr:], p)
		f.nhdr += k
		p = p[k:]
		if f.nhdr == 4 {
			f.nhdr = 0
			f.left = int64(binary.BigEndian.Uint32(f.hdr[:]) & 0xFFFFFF)
			f.body = true
			frames++
		}
	}
	return frames
}
