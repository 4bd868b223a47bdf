package dataplane

import (
	"errors"
	"io"
	"os"
	"sync"
)

// Daemons' logs are bounded whatever clients make them write: each daemon's
// output goes to a file of at most daemonLogMax bytes, which is renamed to
// <file>.1 (replacing the previous one) when the next write would pass the
// bound. A daemon's log therefore never takes more than twice daemonLogMax, and
// keeps its latest daemonLogMax bytes at least. Ganesha logs to its standard
// error (-L STDERR) for this, and also writes a bounded rate per call site
// (patch 0009), so rotation is for floods, not for normal operation.
const daemonLogMax = 8 << 20

// cappedLog is an io.WriteCloser onto a file of bounded size with one rotated
// copy. Writes never fail and never block for long: the daemon at the other end
// of the pipe would stop in write(2) and serve nothing, so what cannot be
// written (a full disk) is dropped.
type cappedLog struct {
	mu   sync.Mutex
	path string
	max  int64
	f    *os.File // nil after a failed reopen: writes are dropped
	size int64
}

// openCappedLog opens path for appending, with writes bounded as described.
func openCappedLog(path string, max int64) (*cappedLog, error) {
	if max <= 0 {
		return nil, errors.New("log bound must be positive")
	}
	l := &cappedLog{path: path, max: max}
	if err := l.open(); err != nil {
		return nil, err
	}
	if l.size > max {
		// Left by a Basin that did not bound it: keep its last max bytes as
		// the rotated copy.
		l.keepTail()
	}
	return l, nil
}

// keepTail replaces path.1 with path's last max bytes and empties path;
// callers hold mu or own l.
func (l *cappedLog) keepTail() {
	tail := make([]byte, l.max)
	n, _ := l.f.ReadAt(tail, l.size-l.max)
	l.f.Close()
	l.f = nil
	os.Remove(l.path + ".1")
	if os.WriteFile(l.path+".1", tail[:n], 0o600) != nil {
		os.Remove(l.path + ".1")
	}
	os.Truncate(l.path, 0)
	if err := l.open(); err != nil {
		l.f, l.size = nil, 0
	}
}

func (l *cappedLog) open() error {
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	l.f, l.size = f, st.Size()
	return nil
}

// rotate moves the file to path.1 and starts an empty one; callers hold mu.
func (l *cappedLog) rotate() {
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
	if err := os.Rename(l.path, l.path+".1"); err != nil && !errors.Is(err, os.ErrNotExist) {
		os.Remove(l.path) // never grow past the bound
	}
	if err := l.open(); err != nil {
		l.f, l.size = nil, 0
	}
}

// Write appends p, rotating first if p would take the file past its bound; of a
// p larger than the bound only the last max bytes are kept. It always reports
// p written.
func (l *cappedLog) Write(p []byte) (int, error) {
	n := len(p)
	l.mu.Lock()
	defer l.mu.Unlock()
	if int64(len(p)) > l.max {
		p = p[int64(len(p))-l.max:]
	}
	if l.f == nil || l.size+int64(len(p)) > l.max {
		l.rotate()
	}
	if l.f != nil {
		w, err := l.f.Write(p)
		l.size += int64(w)
		if err != nil {
			// A full disk or a removed directory: drop, and try a fresh file
			// next time.
			l.f.Close()
			l.f = nil
		}
	}
	return n, nil
}

// Close closes the file.
func (l *cappedLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

var _ io.WriteCloser = (*cappedLog)(nil)
