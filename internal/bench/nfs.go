package bench

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"

	"github.com/basin-nas/basin/internal/nfs3"
)

// NFS runs jobs over NFSv3 from user space: one mount shared by every job,
// Conns TCP connections (nconnect), and each job's iodepth workers pipelining
// their calls on them, so the server really sees iodepth × numjobs requests.
// Its files start I/O and call back (asyncFile): each worker's next call goes
// out from the completion of the one before, on the connection's reader
// goroutine (or, for a reply that came before its call was fully sent, the
// goroutine that finished sending it), with no goroutine hand-off per call, as
// libnfs's event loop does.
type NFS struct {
	// URL is nfs://HOST/export[/dir].
	URL      string
	Conns    int
	UID, GID uint32
	// PortmapPort overrides 111 (tests).
	PortmapPort int

	once   sync.Once
	client *nfs3.Client
	err    error
}

// Name implements Engine.
func (*NFS) Name() string { return "nfs" }

// ParseNFSURL splits nfs://HOST/path.
func ParseNFSURL(s string) (host, dir string, err error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "nfs" || u.Hostname() == "" || u.Port() != "" || u.RawQuery != "" {
		return "", "", fmt.Errorf("--url %q: want nfs://HOST/export[/dir]", s)
	}
	if u.Path == "" || u.Path == "/" {
		return "", "", fmt.Errorf("--url %q: names no export", s)
	}
	return u.Hostname(), u.Path, nil
}

func (e *NFS) mount(ctx context.Context) (*nfs3.Client, error) {
	e.once.Do(func() {
		host, dir, err := ParseNFSURL(e.URL)
		if err != nil {
			e.err = err
			return
		}
		e.client, e.err = nfs3.Mount(ctx, host, dir, nfs3.Options{Conns: e.Conns, PortmapPort: e.PortmapPort,
			Auth: nfs3.Auth{UID: e.UID, GID: e.GID}})
	})
	return e.client, e.err
}

// MaxInFlight is the most calls that were on the wire at once on one connection.
func (e *NFS) MaxInFlight() int64 {
	if e.client == nil {
		return 0
	}
	return e.client.MaxInFlight()
}

// Close unmounts (closes the connections).
func (e *NFS) Close() error {
	if e.client == nil {
		return nil
	}
	return e.client.Close()
}

// Open implements Engine: the job's files are created in the URL's directory (and
// nowhere else: names cannot hold a path) and, for jobs that read, filled to the
// job's size first.
func (e *NFS) Open(ctx context.Context, j *Job, n int) ([]File, error) {
	c, err := e.mount(ctx)
	if err != nil {
		return nil, err
	}
	stable := nfs3.Unstable
	if j.Direct {
		stable = nfs3.FileSync
	}
	var files []File
	for i := range j.NrFiles {
		name := fmt.Sprintf("%s.%d.%d", j.Name, n, i)
		fh, err := c.Create(ctx, c.Root, name, 0o644)
		if err != nil {
			closeAll(files)
			return nil, fmt.Errorf("create %s: %w", name, err)
		}
		f := &nfsFile{c: c, fh: fh, stable: stable, name: name}
		if j.RW != "write" && j.RW != "randwrite" {
			if err := f.layOut(ctx, j.Size); err != nil {
				closeAll(files)
				return nil, err
			}
		}
		files = append(files, f)
	}
	return files, nil
}

type nfsFile struct {
	c        *nfs3.Client
	fh       []byte
	name     string
	stable   nfs3.Stable
	unstable atomic.Bool
}

// layOut extends the file to size with sequential unstable writes and a commit, as
// fio does before a read job.
func (f *nfsFile) layOut(ctx context.Context, size int64) error {
	_, have, err := f.c.Lookup(ctx, f.c.Root, f.name)
	if err != nil {
		return fmt.Errorf("lay out %s: %w", f.name, err)
	}
	if have >= size {
		return nil
	}
	err = extend(ctx, have, size, func(p []byte, off int64) error { return f.write(ctx, p, off, nfs3.Unstable) })
	if err != nil {
		return fmt.Errorf("lay out %s: %w", f.name, err)
	}
	return f.c.Commit(ctx, f.fh)
}

func (f *nfsFile) write(ctx context.Context, p []byte, off int64, how nfs3.Stable) error {
	return writeAll(p, off, func(p []byte, off int64) (int, error) { return f.c.Write(ctx, f.fh, p, off, how) })
}

// writeAll writes p at off with write, which may take less than it is given,
// until all is written.
func writeAll(p []byte, off int64, write func(p []byte, off int64) (int, error)) error {
	for len(p) > 0 {
		n, err := write(p, off)
		if err != nil {
			return err
		}
		if n == 0 {
			return errors.New("server wrote 0 bytes")
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

func (f *nfsFile) ReadAt(p []byte, off int64) error {
	return readAll(p, off, func(p []byte, off int64) (int, bool, error) { return f.c.Read(context.Background(), f.fh, p, off) })
}

// readAll fills p from off with read, which may return less than asked and
// says whether it reached the end of the file; a short file is an error.
func readAll(p []byte, off int64, read func(p []byte, off int64) (int, bool, error)) error {
	for len(p) > 0 {
		n, eof, err := read(p, off)
		if err != nil {
			return err
		}
		if n == 0 || (eof && n < len(p)) {
			return fmt.Errorf("short read at %d", off)
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

func (f *nfsFile) WriteAt(p []byte, off int64) error {
	if f.stable == nfs3.Unstable {
		f.unstable.Store(true)
	}
	return f.write(context.Background(), p, off, f.stable)
}

// StartRead implements asyncFile: the I/O completes on the connection's reader
// goroutine as a rule (nfs3.Client.ReadAsync), and continues as ReadAt's loop does (a short read continues where it ended).
func (f *nfsFile) StartRead(p []byte, off int64, done func(error)) error {
	o := newNFSOp(f, p, off, done)
	if err := f.c.ReadAsync(f.fh, p, off, o.onRead); err != nil {
		nfsOps.Put(o)
		return err
	}
	return nil
}

// StartWrite implements asyncFile, as WriteAt.
func (f *nfsFile) StartWrite(p []byte, off int64, done func(error)) error {
	if f.stable == nfs3.Unstable {
		f.unstable.Store(true)
	}
	o := newNFSOp(f, p, off, done)
	if err := f.c.WriteAsync(f.fh, p, off, f.stable, o.onWrite); err != nil {
		nfsOps.Put(o)
		return err
	}
	return nil
}

// nfsOp is an asynchronous I/O in flight, pooled: its callbacks are made once.
type nfsOp struct {
	f       *nfsFile
	p       []byte
	off     int64
	done    func(error)
	onRead  func(n int, eof bool, err error)
	onWrite func(n int, err error)
}

var nfsOps sync.Pool

func init() {
	nfsOps.New = func() any {
		o := &nfsOp{}
		o.onRead, o.onWrite = o.read, o.wrote
		return o
	}
}

func newNFSOp(f *nfsFile, p []byte, off int64, done func(error)) *nfsOp {
	o := nfsOps.Get().(*nfsOp)
	o.f, o.p, o.off, o.done = f, p, off, done
	return o
}

func (o *nfsOp) read(n int, eof bool, err error) {
	if err == nil && (n == 0 || (eof && n < len(o.p))) {
		err = fmt.Errorf("short read at %d", o.off)
	}
	if err == nil && n < len(o.p) {
		o.p, o.off = o.p[n:], o.off+int64(n)
		if err = o.f.c.ReadAsync(o.f.fh, o.p, o.off, o.onRead); err == nil {
			return
		}
	}
	o.end(err)
}

func (o *nfsOp) wrote(n int, err error) {
	if err == nil && n == 0 {
		err = errors.New("server wrote 0 bytes")
	}
	if err == nil && n < len(o.p) {
		o.p, o.off = o.p[n:], o.off+int64(n)
		if err = o.f.c.WriteAsync(o.f.fh, o.p, o.off, o.f.stable, o.onWrite); err == nil {
			return
		}
	}
	o.end(err)
}

func (o *nfsOp) end(err error) {
	done := o.done
	o.f, o.p, o.done = nil, nil, nil
	nfsOps.Put(o)
	done(err)
}

// Close commits unstable writes, as close() on an NFS client does.
func (f *nfsFile) Close() error {
	if f.unstable.Load() {
		return f.c.Commit(context.Background(), f.fh)
	}
	return nil
}
